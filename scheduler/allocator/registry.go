package allocator

import (
	"fmt"
	"sort"
	"strings"
)

// Names lists the known policies, sorted.
func Names() []string {
	var names []string
	for n := range registry() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the policy registered under name. An unknown name is an
// error that lists the known ones, so a bad --policy fails at start.
func Lookup(name string) (*Policy, error) {
	p, ok := registry()[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q: known policies are %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// DefaultPolicy is the policy used when none is configured: frag, the best
// packer of the five on the traces (docs/packing.md), within the per-call
// cost target (docs/design.md, "Scheduling throughput").
const DefaultPolicy = "frag"

// registry maps a configured name to its policy. A new policy is one entry
// here plus its two functions.
func registry() map[string]*Policy {
	return map[string]*Policy{
		"binpack": {
			Name:        "binpack",
			Description: "fill the fullest card that fits (best fit) on the most allocated node, keeping whole cards and nodes free for large pods",
			ChooseCard:  bestFit,
			Score:       allocatedShare,
			evaluate:    totalsFastPath(shareOf),

			IgnoresWorkload: true,
		},
		"spread": {
			Name:        "spread",
			Description: "use the emptiest card on the least allocated node, spreading load (and the blast radius of a card failure)",
			ChooseCard:  worstFit,
			Score:       func(n *Node, free []int64, r Request, w *Workload) float64 { return 1 - allocatedShare(n, free, r, w) },
			evaluate:    totalsFastPath(func(capacity, left int64) float64 { return 1 - shareOf(capacity, left) }),

			IgnoresWorkload: true,
		},
		"bestfit": {
			Name:        "bestfit",
			Description: "the FGD paper's BestFit baseline: least CPU and GPU left on the node after placement (0.5·cores/128 + 0.5·cards/8), best-fit card",
			ChooseCard:  bestFit,
			Score:       bestFitScore,

			IgnoresWorkload: true,
		},
		"frag": NewFragPolicy(FragOptions{
			Name:           "frag",
			Description:    "fragmentation-aware: best-fit card on the node where FGD's fragmentation growth, plus the growth of GPU stranded by CPU/memory, the scarcity of the models taken and a little binpack, costs least",
			PackWeight:     FragPackWeight,
			StrandWeight:   FragStrandWeight,
			ScarcityWeight: FragScarcityWeight,
			BestFitCard:    true,
		}),
		"fgd": newFGDPolicy(),
	}
}
