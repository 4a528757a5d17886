package allocator

// NewBestFit is the bestfit policy, the FGD paper's BestFit baseline: the
// best-fit card on the node with the least CPU and GPU left (bestFitScore).
func NewBestFit() *Policy {
	return &Policy{
		Name:         "bestfit",
		Description:  "the FGD paper's BestFit baseline: least CPU and GPU left on the node after placement (0.5·cores/128 + 0.5·cards/8), best-fit card",
		ChooseCard:   BestFitCard,
		Score:        bestFitScore,
		FastEvaluate: bestFitFastPath,

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
	return bestFitTotal(node, req, cards)
}

// bestFitTotal is bestFitScore from the GPU left, in cards.
func bestFitTotal(node *Node, req Request, cards float64) float64 {
	score := -0.5 * cards / 8
	if node.HostFree != nil {
		cpuLeft := node.HostFree.CPUMilli - req.Host.CPUMilli
		score -= 0.5 * float64(cpuLeft) / 128000
	}
	return score
}

// bestFitFastPath is bestfit's Evaluate for the common request (one share
// of one card, no model or card choice) on a summarized node whose cards
// with free units are alike (Summary.Alike), from the summary alone: the
// best-fit card is the first of the shares with the least free of at least
// the demand, and the score sums the same fractions in the same order as
// bestFitScore (cards with nothing left add nothing to either). It gives
// exactly what decide gives (TestBestFitFastPathEqualsDecide); any other
// node or request, or a node where no card fits, goes to decide.
func bestFitFastPath(node *Node, req Request, _ *Workload) (Decision, bool) {
	s := &node.sum
	if !s.ok || !s.Alike || s.CardCapacity <= 0 || len(req.Demands) != 1 || len(req.Models) != 0 || req.Cards != nil {
		return Decision{}, false
	}
	u := req.Demands[0].Units
	if req.Demands[0].WholeCards > 0 || u <= 0 || s.MaxFree < u {
		return Decision{}, false
	}
	free := s.Shares[:s.N]
	card := -1
	for i, f := range free {
		if f >= u && (card < 0 || f < free[card]) {
			card = i
		}
	}
	var cards float64
	for i, f := range free {
		if i == card {
			f -= u
		}
		if f > 0 {
			cards += float64(f) / float64(s.CardCapacity)
		}
	}
	return Decision{Node: node.Name, Fits: true, Score: bestFitTotal(node, req, cards)}, true
}
