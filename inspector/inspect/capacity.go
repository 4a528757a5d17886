package inspect

import (
	"cmp"
	"slices"

	"github.com/gpushare/gpushare/api"
)

// ModelSummary is the cards of one model (in one unit) across the cluster:
// what a pod that asks for that model can find.
type ModelSummary struct {
	// Model is the card model as the inventory names it ("-" unknown).
	Model string         `json:"model"`
	Unit  api.MemoryUnit `json:"unit"`
	// Nodes is how many nodes have such a card; Cards how many cards,
	// InServiceCards how many of them are healthy and not isolated.
	Nodes          int `json:"nodes"`
	Cards          int `json:"cards"`
	InServiceCards int `json:"inServiceCards"`
	// FreeCards is how many can be given whole now (Node.FreeCards).
	FreeCards int `json:"freeCards"`
	// InServiceAllocated and InService are over the cards in service.
	InServiceAllocated int64 `json:"inServiceAllocated"`
	InService          int64 `json:"inService"`
	// Free and LargestFree are as in Node, over this model's cards.
	Free        int64 `json:"free"`
	LargestFree int64 `json:"largestFree"`
}

// inService reports whether a card can take pods at all: healthy, and not
// isolated by the device plugin or the operator's annotation (State already
// shows the annotation, api.Isolation.Apply).
func inService(c Card) bool { return c.State == api.CardHealthy }

// takesPods reports whether the extender places new pods on the node: it
// has a readable inventory, is not cordoned, and its isolation annotation
// parses (invalid isolation lists the node in WarnInvalidIsolation).
func takesPods(n Node, refused map[string]bool) bool {
	return n.Unit != "" && !n.Cordoned && !refused[n.Name]
}

// cardFree is what a new container can get on c: its total less what is
// allocated, when the card is in service, not held whole and on a node that
// takes pods; 0 otherwise (never negative).
func cardFree(c Card, nodeTakesPods bool) int64 {
	if !nodeTakesPods || !inService(c) || c.Whole || c.Allocated >= c.Total {
		return 0
	}
	return c.Total - c.Allocated
}

// summarize fills each node's in-service, free and used figures, the
// totals' counterparts, and the per-model summary. It is part of finish.
func (v *View) summarize(totals map[api.MemoryUnit]*Total) {
	refused := map[string]bool{}
	for _, w := range v.Warnings {
		if w.Code == WarnInvalidIsolation {
			refused[w.Node] = true
		}
	}
	type key struct {
		model string
		unit  api.MemoryUnit
	}
	models := map[key]*ModelSummary{}
	for ni := range v.Nodes {
		n := &v.Nodes[ni]
		n.InServiceAllocated, n.InService, n.Free, n.LargestFree, n.FreeCards, n.UsedMiB = 0, 0, 0, 0, 0, nil
		takes := takesPods(*n, refused)
		seen := map[key]bool{}
		for _, c := range n.Cards {
			if c.UsedMiB != nil {
				sum := *c.UsedMiB
				if n.UsedMiB != nil {
					sum += *n.UsedMiB
				}
				n.UsedMiB = &sum
			}
			free := cardFree(c, takes)
			whole := free > 0 && c.Allocated == 0
			if inService(c) {
				n.InServiceAllocated += c.Allocated
				n.InService += c.Total
			}
			n.Free += free
			n.LargestFree = max(n.LargestFree, free)
			if whole {
				n.FreeCards++
			}
			if n.Unit == "" {
				continue
			}
			k := key{dash(c.Model), n.Unit}
			m := models[k]
			if m == nil {
				m = &ModelSummary{Model: k.model, Unit: k.unit}
				models[k] = m
			}
			if !seen[k] {
				seen[k] = true
				m.Nodes++
			}
			m.Cards++
			if inService(c) {
				m.InServiceCards++
				m.InServiceAllocated += c.Allocated
				m.InService += c.Total
			}
			if whole {
				m.FreeCards++
			}
			m.Free += free
			m.LargestFree = max(m.LargestFree, free)
		}
		if t := totals[n.Unit]; t != nil {
			t.InServiceAllocated += n.InServiceAllocated
			t.InService += n.InService
			t.Free += n.Free
			t.LargestFree = max(t.LargestFree, n.LargestFree)
			t.FreeCards += n.FreeCards
		}
	}
	v.Models = make([]ModelSummary, 0, len(models))
	for _, m := range models {
		v.Models = append(v.Models, *m)
	}
	slices.SortFunc(v.Models, func(a, b ModelSummary) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Unit, b.Unit))
	})
}
