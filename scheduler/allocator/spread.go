package allocator

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
