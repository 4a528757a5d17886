package allocator

import (
	"math/rand"
	"slices"
	"testing"
)

// insertionOrder is the placement order as decide computed it before
// issue 16: an insertion sort by "harder" (whole-card demands by count,
// then shares by size), which keeps equal demands in the pod's order. It
// is the reference hardestFirst must reproduce exactly.
func insertionOrder(demands []Demand) []int {
	harder := func(a, b Demand) bool {
		if a.WholeCards != b.WholeCards {
			return a.WholeCards > b.WholeCards
		}
		return a.Units > b.Units
	}
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	for a := 1; a < len(order); a++ {
		for b := a; b > 0 && harder(demands[order[b]], demands[order[b-1]]); b-- {
			order[b], order[b-1] = order[b-1], order[b]
		}
	}
	return order
}

// The n log n ordering is the very same total order as the insertion sort
// it replaced, ties included: random pods of 0–300 containers drawn from
// few distinct values (so most demands tie with others), mixing shares,
// whole-card demands (whose Units also count among equals, as before) and
// invalid zero or negative demands, which decide orders like any other.
func TestHardestFirstIsTheInsertionOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(16))
	for trial := 0; trial < 3000; trial++ {
		n := rng.Intn(300)
		if trial < 50 {
			n = trial // every small size, where pdqsort itself runs insertion sort
		}
		distinct := 1 + rng.Intn(6)
		demands := make([]Demand, n)
		for i := range demands {
			d := Demand{Units: int64(rng.Intn(distinct)) - 1} // -1 and 0 included
			if rng.Intn(4) == 0 {
				d.WholeCards = 1 + rng.Intn(distinct)
			}
			demands[i] = d
		}
		want := insertionOrder(demands)
		got := hardestFirst(demands, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d, demands %v:\nhardestFirst %v\ninsertion    %v", trial, demands, got, want)
		}
	}
}

// Already sorted, reversed and all-equal inputs are where quicksorts go
// wrong; the order must still match, at a size the old sort made slow.
func TestHardestFirstAdversarialInputs(t *testing.T) {
	const n = 2000
	for name, units := range map[string]func(i int) int64{
		"ascending":  func(i int) int64 { return int64(i) },
		"descending": func(i int) int64 { return int64(n - i) },
		"all equal":  func(int) int64 { return 5 },
		"sawtooth":   func(i int) int64 { return int64(i % 7) },
	} {
		demands := make([]Demand, n)
		for i := range demands {
			demands[i] = Demand{Units: units(i)}
		}
		if got, want := hardestFirst(demands, nil), insertionOrder(demands); !slices.Equal(got, want) {
			t.Errorf("%s: hardestFirst differs from the insertion order", name)
		}
	}
}

// hardestFirst appends to the buffer it is given: decide passes a stack
// array for pods of up to 8 containers, so the hot path allocates nothing.
func TestHardestFirstAllocatesNothing(t *testing.T) {
	demands := []Demand{{Units: 3}, {Units: 9}, {WholeCards: 2}, {Units: 3}, {Units: 1}, {Units: 9}, {Units: 4}, {Units: 2}}
	buf := make([]int, 0, len(demands))
	if allocs := testing.AllocsPerRun(100, func() { hardestFirst(demands, buf[:0]) }); allocs != 0 {
		t.Errorf("hardestFirst allocates %v times per call, want 0", allocs)
	}
}
