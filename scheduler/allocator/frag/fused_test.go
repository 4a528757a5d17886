package frag

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/allocatortest"
)

// growthByMeasure is fragGrowth from the definition: frag measured after
// the pod minus frag measured before.
func growthByMeasure(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload) float64 {
	ix := index(w)
	if ix == nil || ix.weight == 0 {
		return 0
	}
	var ha allocator.HostResources
	return ix.growthByDefinition(node, free, node.HostFree, hostAfter(node, req, &ha))
}

// TestGrowthMatchesDefinition checks, on random nodes, workloads and pods,
// that fragGrowth gives the card-by-card definition (measure after −
// measure before, to 1e-9 relative: sums in another order), and that the
// frag policy scores as the definition's growth and its other terms from
// totalsOf make it. Many cases fall in alikeGrowth's closed form (alike
// cards, CPU and memory blocking no shape) and in its level tables' (alike
// cards, memory or CPU blocking no shape).
func TestGrowthMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	fgd := NewFGD()
	frag := New()
	checked, closedForm, cpuLevels, memLevels, scarce := 0, 0, 0, 0, 0
	for iter := 0; iter < 20000; iter++ {
		w, node, req := allocatortest.RandomCase(rng, maxStackCards)
		for _, p := range []*allocator.Policy{fgd, frag} {
			d := p.Decide(node, req, w)
			if !d.Fits {
				continue
			}
			// The free slice the policy scored: replay the placements.
			free := make([]int64, len(node.Cards))
			for i := range node.Cards {
				if usable(node.Cards[i], req.Models) {
					free[i] = node.Cards[i].Free()
				} else {
					free[i] = allocator.Unusable
				}
			}
			after := make([]int64, len(node.Cards))
			beforeFree(node, after)
			for _, pl := range d.Placements {
				for _, g := range pl.Grants {
					if g.Whole {
						free[g.Card] = allocator.TakenWhole
						after[g.Card] = 0
					} else {
						free[g.Card] -= g.Units
						after[g.Card] -= g.Units
					}
				}
			}
			// frag's score: its terms from totalsOf and the definition's growth.
			if p == frag {
				tt := totalsOf(node, free, w)
				want := -growthByMeasure(node, free, req, w)/tt.cardUnits() -
					StrandWeight*tt.strandGrowth(node, req, index(w))/tt.cardUnits() -
					ScarcityWeight*tt.scarcity/tt.cardUnits()
				if tt.capacity > 0 {
					want += PackWeight * float64(tt.capacity-tt.after) / float64(tt.capacity)
				}
				if math.Abs(d.Score-want) > 1e-9*max(1, math.Abs(want)) {
					t.Fatalf("iteration %d: frag score %v, by the definition %v\nnode %+v\nreq %+v", iter, d.Score, want, node.Cards, req)
				}
				if tt.scarcity != 0 {
					scarce++
				}
			}
			got := fragGrowth(node, free, req, w)
			ix := index(w)
			bits := make([]uint64, len(node.Cards))
			ix.modelBits(node, bits)
			before := make([]int64, len(node.Cards))
			beforeFree(node, before)
			var ha allocator.HostResources
			hostB, hostA := node.HostFree, hostAfter(node, req, &ha)
			want := ix.measure(node, after, bits, hostA) - ix.measure(node, before, bits, hostB)
			scale := 0.0
			for _, f := range before {
				scale += float64(max(f, 0))
			}
			if math.Abs(got-want) > 1e-9*max(1, scale) {
				t.Fatalf("iteration %d (%s): growth %v, definition %v\nnode %+v\nreq %+v", iter, p.Name, got, want, node.Cards, req)
			}
			switch {
			case !alikeCards(node):
			case (hostB == nil || hostB.Fits(ix.maxHost)) && (hostA == nil || hostA.Fits(ix.maxHost)):
				closedForm++
			case hostB.MemoryMiB >= ix.maxHost.MemoryMiB && hostA.MemoryMiB >= ix.maxHost.MemoryMiB:
				cpuLevels++
			case hostB.CPUMilli >= ix.maxHost.CPUMilli && hostA.CPUMilli >= ix.maxHost.CPUMilli:
				memLevels++
			}
			checked++
		}
	}
	if checked < 5000 || closedForm < 1000 || cpuLevels < 1000 || memLevels < 1000 || scarce < 1000 {
		t.Fatalf("only %d fitting cases checked, %d in alikeGrowth's domain, %d and %d in alikeGrowthLevels' (CPU, memory)", checked, closedForm, cpuLevels, memLevels)
	}
	t.Logf("%d cases, %d in alikeGrowth's domain, %d and %d in alikeGrowthLevels' (CPU, memory), %d frag scores with a scarcity term", checked, closedForm, cpuLevels, memLevels, scarce)
}

// alikeCards reports whether the node's cards that have free units are all
// of one model and capacity.
func alikeCards(node *allocator.Node) bool {
	first := -1
	for i, c := range node.Cards {
		if !c.Schedulable() || c.Free() <= 0 {
			continue
		}
		if first < 0 {
			first = i
		} else if c.Model != node.Cards[first].Model || c.Capacity != node.Cards[first].Capacity {
			return false
		}
	}
	return true
}

// TestLevelTablesTooLargeFallBack: a workload with more distinct CPU and
// memory requests than the level tables may hold builds none, and the
// growth on host-limited nodes still follows the definition.
func TestLevelTablesTooLargeFallBack(t *testing.T) {
	w := &allocator.Workload{}
	for i := 0; i < 2000; i++ {
		w.Observe(allocator.Shape{Units: int64(1+i%20) * 50, Host: allocator.HostResources{CPUMilli: int64(i), MemoryMiB: int64(i)}})
	}
	ix := index(w)
	if len(ix.byCPU.share) != 0 || len(ix.byMem.share) != 0 {
		t.Fatalf("level tables built: %d and %d entries", len(ix.byCPU.share), len(ix.byMem.share))
	}
	small := &allocator.Workload{}
	small.Observe(allocator.Shape{Units: 100, Host: allocator.HostResources{CPUMilli: 1000, MemoryMiB: 1000}})
	if six := index(small); len(six.byCPU.share) == 0 || len(six.byMem.share) == 0 {
		t.Fatalf("small workload: no level tables")
	}
	rng := rand.New(rand.NewSource(5))
	for iter := 0; iter < 500; iter++ {
		node := &allocator.Node{HostFree: &allocator.HostResources{CPUMilli: int64(rng.Intn(2500)), MemoryMiB: 1 << 30}}
		if rng.Intn(2) == 0 {
			node.HostFree = &allocator.HostResources{CPUMilli: 1 << 30, MemoryMiB: int64(rng.Intn(2500))}
		}
		for i := 0; i < 8; i++ {
			node.Cards = append(node.Cards, allocator.Card{Index: i, Model: "A", Capacity: 1000, State: api.CardHealthy, Used: int64(rng.Intn(21)) * 50})
		}
		req := allocator.Request{Demands: []allocator.Demand{{Units: int64(1+rng.Intn(20)) * 50}}, Host: allocator.HostResources{CPUMilli: int64(rng.Intn(200)), MemoryMiB: int64(rng.Intn(200))}}
		free := make([]int64, len(node.Cards))
		beforeFree(node, free)
		i := allocator.BestFitCard(node, free, req.Demands[0], w)
		if i < 0 {
			continue
		}
		before := slices.Clone(free)
		free[i] -= req.Demands[0].Units
		bits := make([]uint64, len(node.Cards))
		ix.modelBits(node, bits)
		var ha allocator.HostResources
		want := ix.measure(node, free, bits, hostAfter(node, req, &ha)) - ix.measure(node, before, bits, node.HostFree)
		if got := fragGrowth(node, free, req, w); math.Abs(got-want) > 1e-9*8000 {
			t.Fatalf("iteration %d: growth %v, definition %v", iter, got, want)
		}
	}
}
