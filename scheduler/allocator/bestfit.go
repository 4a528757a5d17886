package allocator

// NewBestFit is the bestfit policy, the FGD paper's BestFit baseline: the
// best-fit card on the node with the least CPU and GPU left (bestFitScore).
func NewBestFit() *Policy {
	return &Policy{
		Name:        "bestfit",
		Description: "the FGD paper's BestFit baseline: least CPU and GPU left on the node after placement (0.5·cores/128 + 0.5·cards/8), best-fit card",
		ChooseCard:  BestFitCard,
		Score:       bestFitScore,

		IgnoresWorkload: true,
	}
}

// bestFitScore is the FGD paper's BestFit baseline: prefer the node with the
// least left after placement, CPU and GPU weighed equally against a 128-core,
// 8-GPU reference node: score = −(0.5·CPU_left/128 cores + 0.5·GPU_left/8
// cards). GPU_left counts each card's free share as a fraction of the card.
// Without host information only the GPU term counts.
//
// Worked example: 32 cores and 2.5 cards left: −(0.5·32/128 + 0.5·2.5/8) =
// −0.28125.
func bestFitScore(node *Node, free []int64, req Request, _ *Workload) float64 {
	var cards float64
	for i, c := range node.Cards {
		if !c.Schedulable() || c.Capacity <= 0 {
			continue
		}
		f := free[i]
		if f == Unusable {
			f = c.Free()
		}
		if f > 0 {
			cards += float64(f) / float64(c.Capacity)
		}
	}
	score := -0.5 * cards / 8
	if node.HostFree != nil {
		cpuLeft := node.HostFree.CPUMilli - req.Host.CPUMilli
		score -= 0.5 * float64(cpuLeft) / 128000
	}
	return score
}
