package frag

import (
	"math"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/allocatortest"
)

// TestSummaryPathEqualsCardPath: on random nodes, workloads and pods, every
// frag-family policy decides a summarized node (the extender's snapshots)
// exactly as it decides the same node read card by card, and as its
// decision core does: same fit, same score to the last bit. Half the cases
// are allocatortest's; the other half are nodes of one model whose cards
// hold any number of units (not only multiples of the workload's shares),
// often alike and often several cards with the same free share. It fails
// if the summary path counts, orders or chooses a card differently from
// decide (a tie broken the other way, an unused card miscounted, a model's
// slot or pressure misread), or if a node never summarized (its summary
// computed from its cards) decides otherwise.
func TestSummaryPathEqualsCardPath(t *testing.T) {
	policies := []*allocator.Policy{NewFGD(), New(),
		newPolicy(options{Name: "frag-fgd-card", PackWeight: PackWeight, StrandWeight: StrandWeight, ScarcityWeight: ScarcityWeight}),
	}
	viaSummary := map[string]bool{"fgd": true, "frag": true, "frag-fgd-card": true}
	rng := rand.New(rand.NewSource(43))
	taken := map[string]int{}
	for iter := 0; iter < 12000; iter++ {
		w, node, req := allocatortest.RandomCase(rng, maxStackCards)
		if iter%2 == 1 {
			node = unevenNode(rng, node.HostFree)
		}
		summarized := *node
		summarized.Summarize()
		s := summarized.Summary()
		for _, p := range policies {
			want := core(p, node, req, w)
			cards, cardsOK := p.FastEvaluate(node, req, w)
			got, ok := p.FastEvaluate(&summarized, req, w)
			if ok != cardsOK {
				t.Fatalf("iteration %d (%s): fast path taken %v on the summary, %v on the cards", iter, p.Name, ok, cardsOK)
			}
			if !ok {
				continue
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("iteration %d (%s): summary path differs from decide (-want +got):\n%s\nnode %+v\nreq %+v", iter, p.Name, diff, node.Cards, req)
			}
			if math.Float64bits(got.Score) != math.Float64bits(want.Score) || math.Float64bits(got.Score) != math.Float64bits(cards.Score) {
				t.Fatalf("iteration %d (%s): score %v on the summary, %v on the cards, decide %v", iter, p.Name, got.Score, cards.Score, want.Score)
			}
			if s.Alike && viaSummary[p.Name] {
				taken[p.Name]++
			}
		}
	}
	for name := range viaSummary {
		if taken[name] < 3000 {
			t.Fatalf("%s: summary path taken only %d times (%v)", name, taken[name], taken)
		}
	}
	t.Logf("summary path taken %v", taken)
}

// unevenNode is a node of 1 to 10 healthy cards of one model and capacity
// (sometimes one card of another, or unhealthy), each unused, given whole,
// full or holding any number of units, with free CPU and memory host.
func unevenNode(rng *rand.Rand, host *allocator.HostResources) *allocator.Node {
	node := &allocator.Node{Name: "n", HostFree: host}
	model := []string{"A", "B", "Z"}[rng.Intn(3)]
	capacity := []int64{1000, 2000}[rng.Intn(2)]
	for i := 0; i < 1+rng.Intn(10); i++ {
		c := allocator.Card{Index: i, Model: model, Capacity: capacity, State: api.CardHealthy}
		switch rng.Intn(6) {
		case 0:
		case 1:
			c.Used, c.Whole = c.Capacity, true
		case 2:
			c.Used = c.Capacity
		case 3: // the same share as other cards
			c.Used = 400
		default:
			c.Used = rng.Int63n(c.Capacity + 1)
		}
		switch rng.Intn(20) {
		case 0:
			c.State = api.CardUnhealthy
		case 1:
			c.Model = "B"
		}
		node.Cards = append(node.Cards, c)
	}
	return node
}
