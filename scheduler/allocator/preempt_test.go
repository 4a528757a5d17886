package allocator_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// preemptNode builds a node of cards of capacity GiB each, their Used and
// Whole taken from the residents, as the extender's cache publishes it.
func preemptNode(capacity int64, cards int, rs []allocator.Resident) *allocator.Node {
	n := &allocator.Node{Name: "n", Unit: api.UnitGiB}
	for i := 0; i < cards; i++ {
		n.Cards = append(n.Cards, allocator.Card{Index: i, UUID: fmt.Sprintf("u%d", i), Capacity: capacity, State: api.CardHealthy})
	}
	for _, r := range rs {
		for _, g := range r.Grants {
			if g.Whole {
				n.Cards[g.Card].Whole = true
			} else {
				n.Cards[g.Card].Used += g.Units
			}
		}
	}
	n.Summarize()
	return n
}

// fill returns count residents of units GiB each on card, named
// prefix0..., of priority prio, started at start, start+step, ...
func fill(prefix string, card int, count int, units int64, prio int32, start, step int64) []allocator.Resident {
	var out []allocator.Resident
	for i := 0; i < count; i++ {
		out = append(out, allocator.Resident{ID: fmt.Sprintf("%s%d", prefix, i), Priority: prio, Started: start + int64(i)*step,
			Grants: []allocator.Grant{{Card: card, Units: units}}})
	}
	return out
}

func covered(rs []allocator.Resident, budget int) []allocator.Resident {
	for i := range rs {
		rs[i].Budgets = append(rs[i].Budgets, budget)
	}
	return rs
}

func share(units ...int64) allocator.Request {
	var r allocator.Request
	for i, u := range units {
		r.Demands = append(r.Demands, allocator.Demand{Container: fmt.Sprintf("c%d", i), Units: u})
	}
	return r
}

func TestSelectVictims(t *testing.T) {
	whole := allocator.Request{Demands: []allocator.Demand{{Container: "c0", WholeCards: 1}}}
	cases := []struct {
		name      string
		capacity  int64
		cards     int
		residents []allocator.Resident
		budgets   []int32
		req       allocator.Request
		prio      int32
		want      []string
		wantCards []int
		wantViol  int
		wantNo    string
	}{{
		name: "a 40 GiB pod evicts the five pods of one card, not pods spread over both",
		// Started interleaved: on node totals the five latest-started
		// pods would be victims, three on one card and two on the other.
		capacity: 40, cards: 2, req: share(40), prio: 100,
		residents: append(fill("a", 0, 5, 8, 0, 0, 2), fill("b", 1, 5, 8, 0, 1, 2)...),
		want:      []string{"a0", "a1", "a2", "a3", "a4"}, wantCards: []int{0},
	}, {
		name:     "the card with one large pod costs one victim, not five",
		capacity: 40, cards: 2, req: share(40), prio: 100,
		residents: append(fill("small", 0, 5, 8, 0, 0, 1), fill("big", 1, 1, 40, 0, 10, 1)...),
		want:      []string{"big0"}, wantCards: []int{1},
	}, {
		name:     "the card whose pods have the lower priority is chosen",
		capacity: 40, cards: 2, req: share(40), prio: 100,
		residents: append(fill("hi", 0, 5, 8, 10, 0, 1), fill("lo", 1, 5, 8, 5, 0, 1)...),
		want:      []string{"lo0", "lo1", "lo2", "lo3", "lo4"}, wantCards: []int{1},
	}, {
		name:     "only the pods needed are evicted, the most important kept",
		capacity: 48, cards: 1, req: share(40), prio: 100,
		residents: fill("p", 0, 5, 8, 0, 0, 1),
		want:      []string{"p1", "p2", "p3", "p4"}, wantCards: []int{0},
	}, {
		name:     "a disruption budget moves the choice to the card whose pods it does not cover",
		capacity: 40, cards: 2, req: share(40), prio: 100, budgets: []int32{0},
		residents: append(covered(fill("guarded", 0, 5, 8, 0, 0, 1), 0), fill("free", 1, 5, 8, 0, 10, 1)...),
		want:      []string{"free0", "free1", "free2", "free3", "free4"}, wantCards: []int{1},
	}, {
		name:     "budget violations are counted when no card avoids them",
		capacity: 40, cards: 1, req: share(40), prio: 100, budgets: []int32{2},
		residents: covered(fill("p", 0, 5, 8, 0, 0, 1), 0),
		// The two most important take the two allowed disruptions.
		want: []string{"p2", "p3", "p4", "p0", "p1"}, wantCards: []int{0}, wantViol: 3,
	}, {
		name:     "a pod of equal or higher priority on every card: no victims",
		capacity: 40, cards: 2, req: share(40), prio: 100,
		residents: append(append(fill("a", 0, 4, 8, 0, 0, 1), fill("A", 0, 1, 8, 100, 0, 1)...),
			append(fill("b", 1, 4, 8, 0, 0, 1), fill("B", 1, 1, 8, 200, 0, 1)...)...),
		wantNo: "leaves no room",
	}, {
		name:     "a pod that already fits has no victims",
		capacity: 40, cards: 2, req: share(8), prio: 100,
		residents: fill("a", 0, 5, 8, 0, 0, 1),
		wantNo:    "fits without evicting",
	}, {
		name:     "no pod of lower priority at all",
		capacity: 40, cards: 1, req: share(40), prio: 0,
		residents: fill("a", 0, 5, 8, 0, 0, 1),
		wantNo:    "no pod",
	}, {
		name:     "a protected pod is never a victim",
		capacity: 40, cards: 1, req: share(40), prio: 100,
		residents: []allocator.Resident{{ID: "x", Protected: true, Grants: []allocator.Grant{{Card: 0, Units: 8}}}, {ID: "y", Grants: []allocator.Grant{{Card: 0, Units: 32}}}},
		wantNo:    "leaves no room",
	}, {
		name:     "a whole-card pod empties the card with the fewest pods",
		capacity: 40, cards: 2, req: whole, prio: 100,
		residents: append(fill("a", 0, 2, 8, 0, 0, 1), fill("b", 1, 1, 8, 0, 0, 1)...),
		want:      []string{"b0"}, wantCards: []int{1},
	}, {
		name:     "a whole-card pod evicts a one-card holder, not a pod holding two cards",
		capacity: 40, cards: 3, req: whole, prio: 100,
		residents: []allocator.Resident{{ID: "two", Grants: []allocator.Grant{{Card: 0, Whole: true}, {Card: 1, Whole: true}}},
			{ID: "one", Started: 1, Grants: []allocator.Grant{{Card: 2, Whole: true}}}},
		want: []string{"one"}, wantCards: []int{2},
	}, {
		name:     "a card held whole by a pod of lower priority is taken back",
		capacity: 40, cards: 2, req: whole, prio: 100,
		residents: []allocator.Resident{{ID: "w", Grants: []allocator.Grant{{Card: 0, Whole: true}}},
			{ID: "s", Priority: 200, Grants: []allocator.Grant{{Card: 1, Units: 1}}}},
		want: []string{"w"}, wantCards: []int{0},
	}, {
		name:     "a share never goes to a card freed from a whole-card holder of higher priority",
		capacity: 40, cards: 1, req: share(8), prio: 100,
		residents: []allocator.Resident{{ID: "w", Priority: 100, Grants: []allocator.Grant{{Card: 0, Whole: true}}}},
		wantNo:    "no pod",
	}, {
		name:     "two 40 GiB containers free two cards",
		capacity: 40, cards: 3, req: share(40, 40), prio: 100,
		residents: append(append(fill("a", 0, 1, 40, 0, 0, 1), fill("b", 1, 1, 40, 5, 0, 1)...), fill("c", 2, 1, 40, 1, 0, 1)...),
		want:      []string{"c0", "a0"}, wantCards: []int{0, 2},
	}}
	p, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := allocator.Preemption{Node: preemptNode(tc.capacity, tc.cards, tc.residents), Residents: tc.residents,
				Budgets: tc.budgets, Request: tc.req, Priority: tc.prio}
			v, ok, why := p.SelectVictims(in)
			if tc.wantNo != "" {
				if ok || !contains(why, tc.wantNo) {
					t.Fatalf("got victims %v (ok %v, why %q), want none because %q", v.IDs, ok, why, tc.wantNo)
				}
				return
			}
			if !ok {
				t.Fatalf("no victims: %s", why)
			}
			if diff := cmp.Diff(tc.want, v.IDs); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCards, v.Cards()); diff != "" {
				t.Errorf("preemptor's cards (-want +got):\n%s", diff)
			}
			if v.PDBViolations != tc.wantViol {
				t.Errorf("PDB violations %d, want %d", v.PDBViolations, tc.wantViol)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestHoldOnlyAddsAndOnlyKeepsTheListedCards(t *testing.T) {
	n := preemptNode(40, 3, fill("a", 0, 1, 8, 0, 0, 1))
	held := allocator.Hold(n, []allocator.Grant{{Card: 1, Units: 40}, {Card: 2, Whole: true}})
	if got := []int64{held.Cards[0].Free(), held.Cards[1].Free(), held.Cards[2].Free()}; !cmp.Equal(got, []int64{32, 0, 0}) {
		t.Errorf("free after Hold: %v, want [32 0 0]", got)
	}
	if n.Cards[1].Used != 0 || n.Cards[2].Whole {
		t.Error("Hold changed the snapshot it was given")
	}
	only := allocator.Only(n, []int{2})
	if got := []int64{only.Cards[0].Free(), only.Cards[1].Free(), only.Cards[2].Free()}; !cmp.Equal(got, []int64{0, 0, 40}) {
		t.Errorf("free after Only: %v, want [0 0 40]", got)
	}
}
