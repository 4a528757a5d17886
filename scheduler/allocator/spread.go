package allocator

// NewSpread is the spread policy, binpack's opposite: the emptiest card on
// the least allocated node.
func NewSpread() *Policy {
	return &Policy{
		Name:         "spread",
		Description:  "use the emptiest card on the least allocated node, spreading load (and the blast radius of a card failure)",
		ChooseCard:   worstFit,
		Score:        func(n *Node, free []int64, r Request, w *Workload) float64 { return 1 - allocatedShare(n, free, r, w) },
		FastEvaluate: totalsFastPath(func(capacity, left int64) float64 { return 1 - shareOf(capacity, left) }),

		IgnoresWorkload: true,
	}
}

// worstFit picks the card with the most free (for whole cards: the largest
// unused card); ties go to the lowest index.
func worstFit(node *Node, free []int64, d Demand, _ *Workload) int {
	best := -1
	for i := range free {
		if d.WholeCards > 0 {
			if CanTakeWhole(node, free, i) && (best < 0 || free[i] > free[best]) {
				best = i
			}
			continue
		}
		if free[i] >= d.Units && (best < 0 || free[i] > free[best]) {
			best = i
		}
	}
	return best
}
