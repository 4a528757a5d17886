package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// DRA is frag as node scoring for pods that ask for memory through DRA
// claims: kube-scheduler's DRA allocator, not the extender, picks the card
// (allocator.FirstFitCard), so each node is scored as frag scores it after
// that placement. The extender's DRA prioritize verb uses it; the simulator
// replays it as dra-frag.
func DRA() *allocator.Policy {
	f := New()
	return &allocator.Policy{
		Name:        "frag-dra",
		Description: "frag's node score after the DRA allocator's first-fit card",
		ChooseCard:  allocator.FirstFitCard,
		Score:       f.Score,
	}
}
