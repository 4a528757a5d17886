package allocator

// FirstFitCard is the lowest-index card that takes d: the card the
// kube-scheduler's DRA allocator gives a claim, which takes the first
// device of the slice, in order, whose remaining memory holds it (a
// whole-card demand: the first unused card).
func FirstFitCard(node *Node, free []int64, d Demand, _ *Workload) int {
	for i := range free {
		if d.WholeCards > 0 {
			if CanTakeWhole(node, free, i) {
				return i
			}
			continue
		}
		if free[i] >= d.Units {
			return i
		}
	}
	return -1
}
