package allocator

import (
	"math"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/api"
)

func TestBestFitScoreByHand(t *testing.T) {
	node := &Node{
		Cards: []Card{
			{Capacity: 1000, Used: 500, State: api.CardHealthy},
			{Capacity: 1000, State: api.CardHealthy},
			{Capacity: 1000, State: api.CardHealthy},
		},
		HostFree: &HostResources{CPUMilli: 40000, MemoryMiB: 1 << 20},
	}
	bf := NewBestFit()
	// A whole card and 8 cores: 1.5 cards and 32 cores left:
	// −(0.5·32/128 + 0.5·1.5/8) = −0.21875.
	d := bf.Evaluate(node, Request{Demands: []Demand{{Units: 1000}}, Host: HostResources{CPUMilli: 8000}}, nil)
	if math.Abs(d.Score-(-0.21875)) >= 1e-6 {
		t.Errorf("score = %v, want -0.21875", d.Score)
	}
}

// TestBestFitFastPathEqualsDecide: bestfit's fast path gives exactly
// decide's decision (verdict, score to the bit) wherever it is taken, and
// it is taken for every summarized node whose cards with free units are
// alike and common request that fits. Half the nodes are made alike (one
// model, one capacity). It fails if the fast path picks another card than
// the best fit, or sums the cards' fractions in another order.
func TestBestFitFastPathEqualsDecide(t *testing.T) {
	rng := rand.New(rand.NewSource(47))
	a100, err := api.ParseModelPattern("A100")
	if err != nil {
		t.Fatal(err)
	}
	p := NewBestFit()
	taken := 0
	for iter := 0; iter < 20000; iter++ {
		node, req, summarized := randomSummaryCase(rng, a100)
		if rng.Intn(2) == 0 {
			for i := range node.Cards {
				node.Cards[i].Model, node.Cards[i].Capacity = "A100", 80
			}
			if summarized {
				node.Summarize()
			}
		}
		if rng.Intn(2) == 0 {
			node.HostFree = &HostResources{CPUMilli: rng.Int63n(64000), MemoryMiB: rng.Int63n(1 << 18)}
			req.Host = HostResources{CPUMilli: rng.Int63n(8000)}
		}
		want := p.decide(node, req, nil, false, nil)
		got, ok := p.FastEvaluate(node, req, nil)
		common := summarized && node.InventoryErr == nil && node.sum.Alike && len(req.Demands) == 1 && req.Demands[0].WholeCards == 0 &&
			len(req.Models) == 0 && req.Cards == nil && want.Fits
		if ok != common {
			t.Fatalf("iteration %d: fast path taken %v, want %v for %+v on %+v (fits %v)", iter, ok, common, req, node.Cards, want.Fits)
		}
		if !ok {
			continue
		}
		taken++
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateErrors()); diff != "" {
			t.Fatalf("iteration %d: fast path differs from decide (-want +got):\n%s\nnode %+v\nreq %+v", iter, diff, node.Cards, req)
		}
		if math.Float64bits(got.Score) != math.Float64bits(want.Score) {
			t.Fatalf("iteration %d: score %v, decide %v", iter, got.Score, want.Score)
		}
	}
	if taken < 3000 {
		t.Fatalf("fast path taken only %d times of 20000", taken)
	}
	t.Logf("fast path taken %d times of 20000", taken)
}
