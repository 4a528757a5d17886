package frag

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/allocatortest"
)

// TestFastPathEqualsDecide checks, on random nodes, workloads and pods,
// that the fast path of every frag-family policy gives exactly what decide
// gives (same fit, same score to the last bit), and that it takes the
// common case: one share, no model constraint, some card fits, the cards
// with free units alike.
func TestFastPathEqualsDecide(t *testing.T) {
	fgd := NewFGD()
	frag := New()
	policies := []*allocator.Policy{fgd, frag,
		newPolicy(options{Name: "frag-fgd-card", PackWeight: PackWeight, StrandWeight: StrandWeight, ScarcityWeight: ScarcityWeight}),
	}
	rng := rand.New(rand.NewSource(31))
	taken, fgdChoices := 0, 0
	for iter := 0; iter < 8000; iter++ {
		w, node, req := allocatortest.RandomCase(rng, maxStackCards)
		for _, p := range policies {
			want := core(p, node, req, w)
			got, ok := p.FastEvaluate(node, req, w)
			common := len(req.Demands) == 1 && req.Demands[0].WholeCards == 0 && len(req.Models) == 0 && want.Fits && node.CardSummary().Alike
			if ok != common {
				t.Fatalf("iteration %d (%s): fast path taken %v, want %v for %+v (fits %v)", iter, p.Name, ok, common, req, want.Fits)
			}
			if !ok {
				continue
			}
			taken++
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("iteration %d (%s): fast path differs from decide (-want +got):\n%s\nnode %+v\nreq %+v", iter, p.Name, diff, node.Cards, req)
			}
			if got.Score != want.Score {
				t.Fatalf("iteration %d (%s): score %v, decide %v", iter, p.Name, got.Score, want.Score)
			}
			if p == fgd {
				fgdChoices++
			}
		}
	}
	if taken < 4000 || fgdChoices < 1000 {
		t.Fatalf("fast path taken only %d times (fgd %d)", taken, fgdChoices)
	}
	t.Logf("fast path taken %d times (fgd %d)", taken, fgdChoices)
}

// TestFGDCardMatchesDefinition checks FGD's card choice, made with the
// closed form on alike cards, against the choice made from the definition
// (frag measured with each candidate card taken), on random nodes,
// workloads and pods.
func TestFGDCardMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(37))
	alike := 0
	for iter := 0; iter < 8000; iter++ {
		w, node, req := allocatortest.RandomCase(rng, maxStackCards)
		if len(req.Demands) != 1 || req.Demands[0].Units <= 0 || req.Demands[0].WholeCards > 0 {
			continue
		}
		ix := index(w)
		d := req.Demands[0]
		free := make([]int64, len(node.Cards))
		for i, c := range node.Cards {
			free[i] = allocator.Unusable
			if usable(c, req.Models) {
				free[i] = c.Free()
			}
		}
		got := fragChooseCard(node, free, d, w)
		// By the definition, every card that fits a candidate.
		n := len(node.Cards)
		vec, bits := make([]int64, n), make([]uint64, n)
		ix.modelBits(node, bits)
		afterFree(node, free, vec)
		base := ix.measure(node, vec, bits, node.HostFree)
		want, wantGrowth := -1, 0.0
		for i := range free {
			if free[i] < d.Units {
				continue
			}
			vec[i] -= d.Units
			g := ix.measure(node, vec, bits, node.HostFree) - base
			vec[i] += d.Units
			switch {
			case want < 0 || g < wantGrowth-allocator.ScoreTolerance:
				want, wantGrowth = i, g
			case g <= wantGrowth+allocator.ScoreTolerance && free[i] < free[want]:
				want = i
			}
		}
		if got != want {
			t.Fatalf("iteration %d: card %d, by the definition %d\nnode %+v\nreq %+v", iter, got, want, node.Cards, req)
		}
		if _, _, ok := alikeView(node, vec); ok {
			alike++
		}
	}
	if alike < 800 {
		t.Fatalf("only %d choices on alike cards", alike)
	}
}

// scaleFragCase multiplies every quantity of GPU units in a random case by
// k: with k large, shares exceed maxShareRank and the index searches its
// share units instead of reading shareRank.
func scaleFragCase(w *allocator.Workload, node *allocator.Node, req allocator.Request, k int64) (*allocator.Workload, *allocator.Node, allocator.Request) {
	sw := &allocator.Workload{ModelCapacity: map[string]allocator.ModelCapacity{}}
	for m, c := range w.ModelCapacity {
		sw.ModelCapacity[m] = allocator.ModelCapacity{Cards: c.Cards, Units: c.Units * k}
	}
	if w.ModelCapacity == nil {
		sw.ModelCapacity = nil
	}
	for _, s := range w.Shapes {
		s.Units *= k
		sw.Observe(s)
	}
	sn := *node
	sn.Cards = append([]allocator.Card(nil), node.Cards...)
	for i := range sn.Cards {
		sn.Cards[i].Capacity *= k
		sn.Cards[i].Used *= k
	}
	sr := req
	sr.Demands = append([]allocator.Demand(nil), req.Demands...)
	for i := range sr.Demands {
		sr.Demands[i].Units *= k
	}
	return sw, &sn, sr
}

// TestLargeSharesSearchUnits: with shares too large for shareRank, the
// fast path still gives what decide gives, and the growth still follows
// the definition.
func TestLargeSharesSearchUnits(t *testing.T) {
	fgd := NewFGD()
	frag := New()
	rng := rand.New(rand.NewSource(41))
	taken := 0
	for iter := 0; iter < 2000; iter++ {
		w0, node0, req0 := allocatortest.RandomCase(rng, maxStackCards)
		w, node, req := scaleFragCase(w0, node0, req0, 97)
		if ix := index(w); len(ix.shareUnits) > 0 && len(ix.shareRank) > 0 {
			t.Fatalf("iteration %d: shareRank built for shares up to %d units", iter, ix.shareUnits[len(ix.shareUnits)-1])
		}
		for _, p := range []*allocator.Policy{fgd, frag} {
			want := core(p, node, req, w)
			if got, ok := p.FastEvaluate(node, req, w); ok {
				taken++
				if !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
					t.Fatalf("iteration %d (%s): fast path %+v, decide %+v", iter, p.Name, got, want)
				}
			}
			d := p.Decide(node, req, w)
			if !d.Fits {
				continue
			}
			after := make([]int64, len(node.Cards))
			beforeFree(node, after)
			free := make([]int64, len(node.Cards))
			for i := range node.Cards {
				free[i] = allocator.Unusable
				if usable(node.Cards[i], req.Models) {
					free[i] = node.Cards[i].Free()
				}
			}
			for _, pl := range d.Placements {
				for _, g := range pl.Grants {
					if g.Whole {
						free[g.Card], after[g.Card] = allocator.TakenWhole, 0
					} else {
						free[g.Card] -= g.Units
						after[g.Card] -= g.Units
					}
				}
			}
			ix := index(w)
			bits := make([]uint64, len(node.Cards))
			ix.modelBits(node, bits)
			before := make([]int64, len(node.Cards))
			beforeFree(node, before)
			var ha allocator.HostResources
			def := ix.measure(node, after, bits, hostAfter(node, req, &ha)) - ix.measure(node, before, bits, node.HostFree)
			scale := 0.0
			for _, f := range before {
				scale += float64(f)
			}
			if got := fragGrowth(node, free, req, w); math.Abs(got-def) > 1e-9*max(1, scale) {
				t.Fatalf("iteration %d (%s): growth %v, definition %v", iter, p.Name, got, def)
			}
		}
	}
	if taken < 800 {
		t.Fatalf("fast path taken only %d times", taken)
	}
}

// core is p's decision core alone (p.Evaluate without its fast path): what
// FastEvaluate must give exactly.
func core(p *allocator.Policy, node *allocator.Node, req allocator.Request, w *allocator.Workload) allocator.Decision {
	c := *p
	c.FastEvaluate = nil
	return c.Evaluate(node, req, w)
}

// usable reports whether the decision core offers card c to a pod that
// allows models: schedulable, and of one of them when there are any.
func usable(c allocator.Card, models []string) bool {
	return c.Schedulable() && (len(models) == 0 || slices.Contains(models, c.Model))
}
