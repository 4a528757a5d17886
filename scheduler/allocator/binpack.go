package allocator

// NewBinpack is the binpack policy: the best-fit card on the node whose
// schedulable capacity is the most allocated after placement.
func NewBinpack() *Policy {
	return &Policy{
		Name:         "binpack",
		Description:  "fill the fullest card that fits (best fit) on the most allocated node, keeping whole cards and nodes free for large pods",
		ChooseCard:   BestFitCard,
		Score:        allocatedShare,
		FastEvaluate: totalsFastPath(shareOf),

		IgnoresWorkload: true,
	}
}

// BestFitCard is a Policy's ChooseCard that picks the card that would have
// the least left after the demand (for whole cards: the smallest unused
// card); ties go to the lowest index. It never reads the workload.
func BestFitCard(node *Node, free []int64, d Demand, _ *Workload) int {
	best := -1
	for i := range free {
		if d.WholeCards > 0 {
			if CanTakeWhole(node, free, i) && (best < 0 || free[i] < free[best]) {
				best = i
			}
			continue
		}
		if free[i] >= d.Units && (best < 0 || free[i] < free[best]) {
			best = i
		}
	}
	return best
}

// allocatedShare is the share of the node's schedulable capacity that is
// assigned once the pod is placed: 0 (empty) to 1 (full).
//
// Worked example: cards of 16 and 32 GiB holding 8 and 0 GiB, pod of 8 GiB
// best-fitted on the first card: (8+8+0)/(16+32) = 0.333.
func allocatedShare(node *Node, free []int64, _ Request, _ *Workload) float64 {
	var capacity, left int64
	for i, c := range node.Cards {
		if !c.Schedulable() {
			continue
		}
		capacity += c.Capacity
		switch f := free[i]; {
		case f >= 0:
			left += f
		case f == Unusable:
			// Excluded for this pod (model): what it had free stays free.
			left += c.Free()
		}
	}
	return shareOf(capacity, left)
}
