package allocator_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

func TestNewRequestCarriesWholeCardDemands(t *testing.T) {
	got := allocator.NewRequest(api.PodRequest{
		Containers: []api.ContainerRequest{{Name: "infer", Units: 10}},
		WholeCards: []api.WholeCardRequest{{Name: "train", Cards: 2}},
		Host:       api.HostResources{CPUMilli: 500},
	})
	want := allocator.Request{Demands: []allocator.Demand{{Container: "infer", Units: 10}, {Container: "train", WholeCards: 2}}, Host: allocator.HostResources{CPUMilli: 500}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

// TestWholeCardsAreExclusiveUnderEveryPolicy: whatever the policy, a share
// never goes to a card held whole, a whole card is never one with shared
// memory, and a mixed pod's share never goes to a card it takes whole.
func TestWholeCardsAreExclusiveUnderEveryPolicy(t *testing.T) {
	node := &allocator.Node{Name: "n", Unit: api.UnitGiB, Cards: []allocator.Card{
		{Index: 0, UUID: "u0", Capacity: 80, Used: 10, State: api.CardHealthy},
		{Index: 1, UUID: "u1", Capacity: 80, Whole: true, State: api.CardHealthy},
		{Index: 2, UUID: "u2", Capacity: 80, State: api.CardHealthy},
		{Index: 3, UUID: "u3", Capacity: 80, State: api.CardHealthy},
	}}
	req := allocator.Request{Demands: []allocator.Demand{{Container: "infer", Units: 70}, {Container: "train", WholeCards: 2}}}
	for _, name := range registry.Names() {
		p, err := registry.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		d := p.Decide(node, req, nil)
		if !d.Fits {
			t.Fatalf("%s: does not fit: %s", name, d.Message())
		}
		want := []allocator.Placement{
			{Container: "infer", Grants: []allocator.Grant{{Card: 0, Units: 70}}},
			{Container: "train", Grants: []allocator.Grant{{Card: 2, Units: 80, Whole: true}, {Card: 3, Units: 80, Whole: true}}},
		}
		if diff := cmp.Diff(want, d.Placements, cmp.Transformer("sortGrants", sortGrants)); diff != "" {
			t.Errorf("%s: placements (-want +got):\n%s", name, diff)
		}
		if e := p.Evaluate(node, req, nil); !e.Fits {
			t.Errorf("%s: Evaluate disagrees with Decide: %s", name, e.Message())
		}
		// Three whole cards: only two are free, and a node of four cards
		// could hold them once the others are released (resolvable).
		d = p.Decide(node, allocator.Request{Demands: []allocator.Demand{{Container: "train", WholeCards: 3}}}, nil)
		if d.Fits || d.Reasons[0].Code != allocator.ReasonNotEnoughWholeCards ||
			d.Message() != `container "train" needs 3 free whole cards; node has 2 (of 4 usable: 1 with shared memory, 1 held whole)` {
			t.Errorf("%s: 3 whole cards: %+v", name, d)
		}
		// Five: more than the node has at all (unresolvable).
		d = p.Decide(node, allocator.Request{Demands: []allocator.Demand{{Container: "a", WholeCards: 2}, {Container: "b", WholeCards: 3}}}, nil)
		if d.Fits || d.Reasons[0].Code != allocator.ReasonMoreCardsThanNode {
			t.Errorf("%s: 5 whole cards on 4: %+v", name, d)
		}
	}
}

func sortGrants(gs []allocator.Grant) map[int]allocator.Grant {
	out := map[int]allocator.Grant{}
	for _, g := range gs {
		out[g.Card] = g
	}
	return out
}
