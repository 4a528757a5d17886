package allocator

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/api"
)

// randomSummaryCase is a node, summarized or not, and a request, drawn to
// reach every branch decide and the totals fast path take: cards unhealthy,
// isolated, given whole, used past their capacity or of no capacity, nodes
// without inventory or cards, and requests with several containers, whole
// cards, a model or card choice, or a non-positive share.
func randomSummaryCase(rng *rand.Rand, a100 api.ModelPattern) (*Node, Request, bool) {
	node := &Node{Name: "n", Unit: api.UnitGiB}
	for i := 0; i < rng.Intn(11); i++ {
		c := Card{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: []string{"A100", "H100"}[rng.Intn(2)], State: api.CardHealthy}
		c.Capacity = []int64{0, 16, 40, 80, 80, 80}[rng.Intn(6)]
		switch rng.Intn(6) {
		case 0: // unused
		case 1:
			c.Whole = true
		case 2: // past its capacity (an informer showing a conflict)
			c.Used = c.Capacity + int64(rng.Intn(10))
		default:
			c.Used = int64(rng.Intn(int(c.Capacity) + 1))
		}
		switch rng.Intn(10) {
		case 0:
			c.State = api.CardUnhealthy
		case 1:
			c.State = api.CardIsolated
		}
		node.Cards = append(node.Cards, c)
	}
	if rng.Intn(30) == 0 {
		node.InventoryErr = errors.New("annotation malformed")
	}
	summarized := rng.Intn(5) != 0
	if summarized {
		node.Summarize()
	}
	var req Request
	switch rng.Intn(10) {
	case 0:
		req.Demands = []Demand{{Container: "a", WholeCards: 1 + rng.Intn(2)}}
	case 1:
		req.Demands = []Demand{{Container: "a", Units: int64(1 + rng.Intn(40))}, {Container: "b", Units: int64(1 + rng.Intn(40))}}
	case 2:
		req.Demands = []Demand{{Container: "a", Units: int64(-rng.Intn(2))}}
	default:
		req.Demands = []Demand{{Container: "a", Units: int64(1 + rng.Intn(85))}}
	}
	switch rng.Intn(8) {
	case 0:
		req.Models = []string{"H100"}
	case 1:
		req.Cards = NewCardFilter(api.CardChoice{ExcludeModels: []api.ModelPattern{a100}}, nil)
	}
	return node, req, summarized
}

// TestTotalsFastPathEqualsDecide: binpack's and spread's fast path gives
// exactly decide's decision (verdict, score to the bit) wherever it is
// taken, and it is taken for every summarized node and common request
// that fits. It fails if the summary counts a card decide does not (an
// unhealthy one, a whole one, one used past its capacity), or if the
// fast path answers for a request or node decide treats otherwise.
func TestTotalsFastPathEqualsDecide(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	a100, err := api.ParseModelPattern("A100")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Policy{NewBinpack(), NewSpread()} {
		name := p.Name
		taken := 0
		for iter := 0; iter < 20000; iter++ {
			node, req, summarized := randomSummaryCase(rng, a100)
			want := p.decide(node, req, nil, false, nil)
			got, ok := p.FastEvaluate(node, req, nil)
			common := summarized && node.InventoryErr == nil && len(req.Demands) == 1 && req.Demands[0].WholeCards == 0 &&
				len(req.Models) == 0 && req.Cards == nil && want.Fits
			if ok != common {
				t.Fatalf("%s, iteration %d: fast path taken %v, want %v for %+v on %+v (fits %v)", name, iter, ok, common, req, node.Cards, want.Fits)
			}
			if !ok {
				continue
			}
			taken++
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("%s, iteration %d: fast path differs from decide (-want +got):\n%s\nnode %+v\nreq %+v", name, iter, diff, node.Cards, req)
			}
			if got.Score != want.Score {
				t.Fatalf("%s, iteration %d: score %v, decide %v", name, iter, got.Score, want.Score)
			}
			// Evaluate, the path callers take, gives the same.
			if e := p.Evaluate(node, req, nil); e.Score != want.Score || !e.Fits {
				t.Fatalf("%s, iteration %d: Evaluate %+v, decide %+v", name, iter, e, want)
			}
		}
		if taken < 2500 {
			t.Fatalf("%s: fast path taken only %d times of 20000", name, taken)
		}
		t.Logf("%s: fast path taken %d times of 20000", name, taken)
	}
}

// TestSummarizeCountsOnlySchedulableCards pins the totals on a worked
// example: an unhealthy card, an isolated one, a whole one and one used
// past its capacity.
func TestSummarizeCountsOnlySchedulableCards(t *testing.T) {
	n := &Node{Name: "n", Cards: []Card{
		{Index: 0, Capacity: 80, Used: 30, State: api.CardHealthy},
		{Index: 1, Capacity: 80, Used: 0, State: api.CardUnhealthy},
		{Index: 2, Capacity: 40, Used: 0, State: api.CardIsolated},
		{Index: 3, Capacity: 40, Used: 40, Whole: true, State: api.CardHealthy},
		{Index: 4, Capacity: 16, Used: 20, State: api.CardHealthy},
		{Index: 5, Capacity: 16, Used: 4, State: api.CardHealthy},
	}}
	if n.Summarized() {
		t.Fatal("a node is summarized before Summarize")
	}
	n.Summarize()
	want := summary{ok: true, Summary: Summary{Cards: 4, Capacity: 80 + 40 + 16 + 16, Free: 50 + 0 + 0 + 12, MaxFree: 50}}
	if n.sum != want || !n.Summarized() {
		t.Fatalf("summary %+v, want %+v", n.sum, want)
	}
	n.InventoryErr = errors.New("unreadable")
	n.Summarize()
	if n.Summarized() {
		t.Fatal("a node without inventory is summarized: the fast path would answer for it")
	}
}

// TestSummarizeKeepsAlikeShares: the free shares of the schedulable cards
// with free units, in card order, when they are alike, and none otherwise.
func TestSummarizeKeepsAlikeShares(t *testing.T) {
	card := func(model string, capacity, used int64) Card {
		return Card{Model: model, Capacity: capacity, Used: used, State: api.CardHealthy}
	}
	unhealthy := card("H100", 40, 0)
	unhealthy.State = api.CardUnhealthy
	whole := card("H100", 40, 0)
	whole.Whole = true
	nine := make([]Card, 9)
	for i := range nine {
		nine[i] = card("A100", 80, int64(i))
	}
	for _, tc := range []struct {
		name  string
		cards []Card
		want  Summary
	}{
		{"worked example: a full card and an unhealthy one are left out", []Card{card("A100", 80, 30), card("A100", 80, 80), card("A100", 80, 0), unhealthy},
			Summary{Cards: 3, Capacity: 240, Free: 130, MaxFree: 80, Alike: true, Model: "A100", CardCapacity: 80, N: 2, Shares: [AlikeShares]int64{50, 80}}},
		{"a full card or a whole one of another model does not matter", []Card{card("H100", 40, 40), card("A100", 80, 10), whole},
			Summary{Cards: 3, Capacity: 160, Free: 70, MaxFree: 70, Alike: true, Model: "A100", CardCapacity: 80, N: 1, Shares: [AlikeShares]int64{70}}},
		{"two models with free units are not alike", []Card{card("A100", 80, 10), card("H100", 80, 10)},
			Summary{Cards: 2, Capacity: 160, Free: 140, MaxFree: 70}},
		{"two capacities with free units are not alike", []Card{card("A100", 80, 10), card("A100", 40, 10)},
			Summary{Cards: 2, Capacity: 120, Free: 100, MaxFree: 70}},
		{"no card with free units", []Card{card("A100", 80, 80)},
			Summary{Cards: 1, Capacity: 80}},
		{"more cards with free units than the summary keeps", nine,
			Summary{Cards: 9, Capacity: 720, Free: 720 - 36, MaxFree: 80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{Name: "n", Cards: tc.cards}
			n.Summarize()
			got := n.Summary()
			if got == nil {
				t.Fatal("not summarized")
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}
