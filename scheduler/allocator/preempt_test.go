package allocator_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// fullNode is a node of cards of capacity units, each held by perCard
// holders of capacity/perCard units at priority 0 (IDs "c<card>-<k>"),
// listed card by card.
func fullNode(cards, perCard int, capacity int64) (*allocator.Node, []allocator.Holder) {
	n := &allocator.Node{Name: "n", Unit: api.UnitGiB}
	var hs []allocator.Holder
	for c := 0; c < cards; c++ {
		n.Cards = append(n.Cards, allocator.Card{Index: c, UUID: fmt.Sprintf("u%d", c), Capacity: capacity, Used: capacity, State: api.CardHealthy})
		for k := 0; k < perCard; k++ {
			hs = append(hs, allocator.Holder{ID: fmt.Sprintf("c%d-%d", c, k), Grants: []allocator.Grant{{Card: c, Units: capacity / int64(perCard)}}})
		}
	}
	n.Summarize()
	return n, hs
}

func share(units int64) allocator.Request {
	return allocator.Request{Demands: []allocator.Demand{{Container: "main", Units: units}}}
}

// victimIDs names the victims.
func victimIDs(hs []allocator.Holder, v allocator.Victims) []string {
	var out []string
	for _, h := range v.Holders {
		out = append(out, hs[h].ID)
	}
	return out
}

func TestPreempt(t *testing.T) {
	tests := []struct {
		name  string
		setup func() (*allocator.Node, []allocator.Holder)
		req   allocator.Request
		want  []string
		viol  int
		ok    bool
		cards []int
	}{{
		name:  "a full card's worth evicts exactly the five pods of one card",
		setup: func() (*allocator.Node, []allocator.Holder) { return fullNode(4, 5, 40) },
		req:   share(40),
		want:  []string{"c0-0", "c0-1", "c0-2", "c0-3", "c0-4"},
		ok:    true, cards: []int{0},
	}, {
		name: "half a card evicts two pods of one card, not one on each of two cards",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 4, 40)
			return n, hs
		},
		req:  share(20),
		want: []string{"c0-2", "c0-3"},
		ok:   true, cards: []int{0},
	}, {
		name: "a protected card is passed over for one whose pods no budget protects",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 5, 40)
			for i := 0; i < 5; i++ {
				hs[i].ViolatesPDB = true
			}
			return n, hs
		},
		req:  share(40),
		want: []string{"c1-0", "c1-1", "c1-2", "c1-3", "c1-4"},
		ok:   true, cards: []int{1},
	}, {
		name: "a budget is violated when every card is protected, and counted",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 2, 40)
			for i := range hs {
				hs[i].ViolatesPDB = true
			}
			return n, hs
		},
		req:  share(40),
		want: []string{"c0-0", "c0-1"},
		viol: 2, ok: true, cards: []int{0},
	}, {
		name: "the card whose pods have the lowest priority is chosen",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 2, 40)
			hs[0].Priority, hs[1].Priority = 5, 5
			return n, hs
		},
		req:  share(40),
		want: []string{"c1-0", "c1-1"},
		ok:   true, cards: []int{1},
	}, {
		name: "fewer pods win at equal priority",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n := &allocator.Node{Name: "n", Unit: api.UnitGiB, Cards: []allocator.Card{
				{Index: 0, UUID: "u0", Capacity: 40, Used: 40, State: api.CardHealthy},
				{Index: 1, UUID: "u1", Capacity: 40, Used: 40, State: api.CardHealthy},
			}}
			n.Summarize()
			return n, []allocator.Holder{
				{ID: "small-a", Grants: []allocator.Grant{{Card: 0, Units: 20}}},
				{ID: "small-b", Grants: []allocator.Grant{{Card: 0, Units: 20}}},
				{ID: "big", Grants: []allocator.Grant{{Card: 1, Units: 40}}},
			}
		},
		req:  share(30),
		want: []string{"big"},
		ok:   true, cards: []int{1},
	}, {
		name: "a whole-card request frees a card whole",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 2, 40)
			return n, hs
		},
		req:  allocator.Request{Demands: []allocator.Demand{{Container: "train", WholeCards: 1}}},
		want: []string{"c0-0", "c0-1"},
		ok:   true, cards: []int{0},
	}, {
		name: "a card held whole is freed by its holder",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n := &allocator.Node{Name: "n", Unit: api.UnitGiB, Cards: []allocator.Card{
				{Index: 0, UUID: "u0", Capacity: 40, Whole: true, State: api.CardHealthy},
			}}
			n.Summarize()
			return n, []allocator.Holder{{ID: "whole", Grants: []allocator.Grant{{Card: 0, Units: 40, Whole: true}}}}
		},
		req:  share(10),
		want: []string{"whole"},
		ok:   true, cards: []int{0},
	}, {
		name: "nothing helps when the pods that could go do not free enough",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(2, 2, 40)
			// Only one pod of each card is a potential victim.
			return n, []allocator.Holder{hs[0], hs[2]}
		},
		req: share(40),
	}, {
		name: "nothing helps on an unhealthy card",
		setup: func() (*allocator.Node, []allocator.Holder) {
			n, hs := fullNode(1, 2, 40)
			n.Cards[0].State = api.CardUnhealthy
			n.Summarize()
			return n, hs
		},
		req: share(10),
	}}
	for _, name := range registry.Names() {
		p, err := registry.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				node, hs := tc.setup()
				v, ok := p.Preempt(node, tc.req, &allocator.Workload{}, hs)
				if ok != tc.ok {
					t.Fatalf("ok = %v, want %v", ok, tc.ok)
				}
				if diff := cmp.Diff(tc.want, victimIDs(hs, v)); diff != "" {
					t.Errorf("victims (-want +got):\n%s", diff)
				}
				if v.Violations != tc.viol {
					t.Errorf("violations = %d, want %d", v.Violations, tc.viol)
				}
				var cards []int
				for _, pl := range v.Placements {
					for _, g := range pl.Grants {
						cards = append(cards, g.Card)
					}
				}
				if diff := cmp.Diff(tc.cards, cards); diff != "" {
					t.Errorf("preemptor's cards (-want +got):\n%s", diff)
				}
			})
		}
	}
}
