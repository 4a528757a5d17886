package allocator_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// card builds a healthy A100 card.
func card(index int, capacity, used int64) allocator.Card {
	return allocator.Card{Index: index, UUID: "GPU-" + string(rune('a'+index)), Model: "A100", Capacity: capacity, Used: used, State: api.CardHealthy}
}

func withState(c allocator.Card, s api.CardState) allocator.Card { c.State = s; return c }
func withModel(c allocator.Card, m string) allocator.Card        { c.Model = m; return c }

func node(cards ...allocator.Card) *allocator.Node {
	return &allocator.Node{Name: "n", Unit: api.UnitGiB, Cards: cards}
}

func shares(units ...int64) allocator.Request {
	var r allocator.Request
	for i, u := range units {
		r.Demands = append(r.Demands, allocator.Demand{Container: string(rune('a' + i)), Units: u})
	}
	return r
}

func place(container string, cardIndex int, units int64) allocator.Placement {
	return allocator.Placement{Container: container, Grants: []allocator.Grant{{Card: cardIndex, Units: units}}}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		node   *allocator.Node
		req    allocator.Request
		want   allocator.Decision
	}{
		{
			name:   "binpack picks the fullest card that fits on heterogeneous cards",
			policy: "binpack",
			node:   node(card(0, 80, 10), card(1, 16, 4), card(2, 40, 20)),
			req:    shares(12),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 1, 12)}},
		},
		{
			name:   "spread picks the emptiest card",
			policy: "spread",
			node:   node(card(0, 80, 10), card(1, 16, 4), card(2, 40, 20)),
			req:    shares(12),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 0, 12)}},
		},
		{
			name:   "exact fit fills a card to its last unit",
			policy: "binpack",
			node:   node(card(0, 40, 30), card(1, 40, 0)),
			req:    shares(10),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 0, 10)}},
		},
		{
			name:   "multi-container pod: the larger container is placed first and the second gets another card when the first is full",
			policy: "binpack",
			node:   node(card(0, 24, 0), card(1, 16, 0)),
			req:    shares(10, 20),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 1, 10), place("b", 0, 20)}},
		},
		{
			name:   "multi-container pod shares one card when it has room for both",
			policy: "binpack",
			node:   node(card(0, 40, 0), card(1, 80, 0)),
			req:    shares(10, 20),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 0, 10), place("b", 0, 20)}},
		},
		{
			name:   "unhealthy and isolated cards take no new pods even when empty",
			policy: "binpack",
			node:   node(withState(card(0, 80, 0), api.CardUnhealthy), withState(card(1, 80, 0), api.CardIsolated), card(2, 40, 30)),
			req:    shares(10),
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 2, 10)}},
		},
		{
			name:   "nothing fits: the reason names the demand and the largest free card",
			policy: "binpack",
			node:   node(card(0, 40, 30), card(1, 40, 35), card(2, 40, 20), card(3, 40, 38)),
			req:    shares(24),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonInsufficientFree, Container: "a",
				Message: `no single card has 24 GiB free for container "a"; largest free is 20 GiB on card 2`}}},
		},
		{
			name:   "free memory split over cards does not fit one container",
			policy: "spread",
			node:   node(card(0, 16, 8), card(1, 16, 8)),
			req:    shares(12),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonInsufficientFree, Container: "a",
				Message: `no single card has 12 GiB free for container "a"; largest free is 8 GiB on card 0`}}},
		},
		{
			name:   "larger than any card",
			policy: "binpack",
			node:   node(card(0, 16, 0), card(1, 24, 0)),
			req:    shares(32),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonLargerThanAnyCard, Container: "a",
				Message: `container "a" asks for 32 GiB, more than any card holds (largest is 24 GiB)`}}},
		},
		{
			name:   "only unhealthy and isolated cards",
			policy: "binpack",
			node:   node(withState(card(0, 80, 0), api.CardUnhealthy), withState(card(1, 80, 0), api.CardIsolated)),
			req:    shares(1),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonNoSchedulableCard, Container: "a",
				Message: `no schedulable GPU for container "a" (2 cards: 1 unhealthy, 1 isolated)`}}},
		},
		{
			name:   "a node without cards",
			policy: "binpack",
			node:   node(),
			req:    shares(1),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonNoSchedulableCard, Container: "a",
				Message: `no schedulable GPU for container "a" (the node has no GPU cards)`}}},
		},
		{
			name:   "model filter keeps the pod off other models",
			policy: "binpack",
			node:   node(withModel(card(0, 80, 70), "H100"), card(1, 40, 0)),
			req:    allocator.Request{Demands: shares(8).Demands, Models: []string{"A100"}},
			want:   allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{place("a", 1, 8)}},
		},
		{
			name:   "model filter with no card of the model",
			policy: "binpack",
			node:   node(withModel(card(0, 80, 0), "H100")),
			req:    allocator.Request{Demands: shares(8).Demands, Models: []string{"A100"}},
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonNoSchedulableCard, Container: "a",
				Message: `no schedulable GPU for container "a" (1 cards: 1 not of model A100)`}}},
		},
		{
			name:   "whole cards are taken only when unused, smallest first under binpack",
			policy: "binpack",
			node:   node(card(0, 80, 0), card(1, 40, 1), card(2, 40, 0), card(3, 24, 0)),
			req:    allocator.Request{Demands: []allocator.Demand{{Container: "a", WholeCards: 2}}},
			want: allocator.Decision{Node: "n", Fits: true, Placements: []allocator.Placement{{Container: "a", Grants: []allocator.Grant{
				{Card: 3, Units: 24, Whole: true}, {Card: 2, Units: 40, Whole: true}}}}},
		},
		{
			name:   "not enough unused cards for a whole-card demand",
			policy: "binpack",
			node:   node(card(0, 80, 0), card(1, 40, 1)),
			req:    allocator.Request{Demands: []allocator.Demand{{Container: "a", WholeCards: 2}}},
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonNotEnoughWholeCards, Container: "a",
				Message: `container "a" needs 2 free whole cards; node has 1 (of 2 usable: 1 with shared memory)`}}},
		},
		{
			name:   "a card held whole takes nothing else",
			policy: "binpack",
			node:   node(allocator.Card{Index: 0, Capacity: 40, Used: 40, Whole: true, State: api.CardHealthy}, card(1, 40, 39)),
			req:    shares(2),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonInsufficientFree, Container: "a",
				Message: `no single card has 2 GiB free for container "a"; largest free is 1 GiB on card 1`}}},
		},
		{
			name:   "a zero demand is invalid",
			policy: "binpack",
			node:   node(card(0, 40, 0)),
			req:    shares(0),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonInvalidDemand, Container: "a",
				Message: `container "a" asks for 0 units, want at least 1`}}},
		},
		{
			name:   "a node whose inventory is unreadable never fits",
			policy: "binpack",
			node:   &allocator.Node{Name: "n", InventoryErr: api.ErrNoInventory, Cards: []allocator.Card{card(0, 80, 0)}},
			req:    shares(1),
			want: allocator.Decision{Node: "n", Reasons: []allocator.Reason{{Code: allocator.ReasonNoInventory,
				Message: "GPU inventory unusable: " + api.ErrNoInventory.Error()}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := registry.Lookup(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			before := cloneNode(tc.node)
			got := p.Decide(tc.node, tc.req, nil)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(allocator.Decision{}, "Score")); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			// Evaluate is Decide without placements.
			ev := p.Evaluate(tc.node, tc.req, nil)
			wantEv := got
			wantEv.Placements = nil
			if diff := cmp.Diff(wantEv, ev); diff != "" {
				t.Errorf("Evaluate differs from Decide (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.node, cmpopts.EquateErrors(), cmpopts.IgnoreUnexported(allocator.Node{})); diff != "" {
				t.Errorf("Decide changed its input (-before +after):\n%s", diff)
			}
		})
	}
}

func cloneNode(n *allocator.Node) *allocator.Node {
	c := *n
	c.Cards = append([]allocator.Card(nil), n.Cards...)
	return &c
}

func TestScores(t *testing.T) {
	// Card 40 GiB; 8 GiB pod. quarter: 10 used; empty: 0; half: 20.
	nodes := []*allocator.Node{
		{Name: "quarter", Unit: api.UnitGiB, Cards: []allocator.Card{card(0, 40, 10)}},
		{Name: "empty", Unit: api.UnitGiB, Cards: []allocator.Card{card(0, 40, 0)}},
		{Name: "half", Unit: api.UnitGiB, Cards: []allocator.Card{card(0, 40, 20)}},
	}
	want := map[string][]float64{
		// allocatedShare after placement: (10+8)/40, 8/40, (20+8)/40.
		"binpack": {0.45, 0.2, 0.7},
		"spread":  {0.55, 0.8, 0.3},
	}
	for policy, scores := range want {
		p, err := registry.Lookup(policy)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for _, n := range nodes {
			got = append(got, p.Evaluate(n, shares(8), nil).Score)
		}
		if diff := cmp.Diff(scores, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
			t.Errorf("%s scores (-want +got):\n%s", policy, diff)
		}
	}
}

func TestSpreadAndBinpackChooseDifferentNodes(t *testing.T) {
	nodes := []*allocator.Node{
		{Name: "busy", Cards: []allocator.Card{card(0, 40, 30)}},
		{Name: "idle", Cards: []allocator.Card{card(0, 40, 0)}},
	}
	best := func(policy string) string {
		p, _ := registry.Lookup(policy)
		var ds []allocator.Decision
		for _, n := range nodes {
			ds = append(ds, p.Evaluate(n, shares(5), nil))
		}
		idx := allocator.BestNodes(ds)
		if len(idx) != 1 {
			t.Fatalf("%s: best nodes %v, want exactly one", policy, idx)
		}
		return ds[idx[0]].Node
	}
	if got := best("binpack"); got != "busy" {
		t.Errorf("binpack chose %s, want busy", got)
	}
	if got := best("spread"); got != "idle" {
		t.Errorf("spread chose %s, want idle", got)
	}
}

func TestBestNodesAndExtenderScores(t *testing.T) {
	ds := []allocator.Decision{
		{Node: "a", Fits: true, Score: 0.5},
		{Node: "b", Fits: false, Score: 0.9}, // a score on a non-fitting node is ignored
		{Node: "c", Fits: true, Score: 0.8},
		{Node: "d", Fits: true, Score: 0.8 + 1e-12}, // ties within tolerance
		{Node: "e", Fits: true, Score: 0.2},
	}
	if diff := cmp.Diff([]int{2, 3}, allocator.BestNodes(ds)); diff != "" {
		t.Errorf("BestNodes (-want +got):\n%s", diff)
	}
	if got := allocator.BestNodes([]allocator.Decision{{Node: "x"}}); len(got) != 0 {
		t.Errorf("BestNodes with nothing fitting = %v", got)
	}
	// (0.5-0.2)/(0.8-0.2)*10 = 5; c and d 10; e 0; b does not fit.
	if diff := cmp.Diff([]int64{5, 0, 10, 10, 0}, allocator.ExtenderScores(ds, 10)); diff != "" {
		t.Errorf("ExtenderScores (-want +got):\n%s", diff)
	}
	equal := []allocator.Decision{{Fits: true, Score: 0.3}, {Fits: true, Score: 0.3}, {}}
	if diff := cmp.Diff([]int64{10, 10, 0}, allocator.ExtenderScores(equal, 10)); diff != "" {
		t.Errorf("ExtenderScores with equal scores (-want +got):\n%s", diff)
	}
}

func TestEvaluateAllEqualsEvaluatePerNode(t *testing.T) {
	nodes := []*allocator.Node{
		node(card(0, 40, 30), card(1, 16, 0)),
		nil, // unknown to the caller: skipped
		{Name: "many", Cards: func() []allocator.Card {
			var cs []allocator.Card
			for i := 0; i < 20; i++ { // more cards than the shared scratch holds
				cs = append(cs, card(i, 24, int64(i)))
			}
			return cs
		}()},
		node(card(0, 8, 0)),
		{Name: "broken", InventoryErr: api.ErrNoInventory},
	}
	for _, name := range registry.Names() {
		p, _ := registry.Lookup(name)
		req := shares(10, 6)
		got := make([]allocator.Decision, len(nodes))
		got[1] = allocator.Decision{Node: "left alone"}
		p.EvaluateAll(nodes, req, nil, got)
		for i, n := range nodes {
			want := allocator.Decision{Node: "left alone"}
			if n != nil {
				want = p.Evaluate(n, req, nil)
			}
			if diff := cmp.Diff(want, got[i]); diff != "" {
				t.Errorf("%s: node %d (-Evaluate +EvaluateAll):\n%s", name, i, diff)
			}
		}
	}
}
