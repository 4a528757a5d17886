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
		"binpack": NewBinpack(),
		"spread":  NewSpread(),
		"bestfit": NewBestFit(),
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
