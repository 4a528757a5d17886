package allocator

// ScoreTolerance is how close two scores must be to count as a tie.
const ScoreTolerance = 1e-9

// BestNodes returns the positions in decisions of the fitting nodes with the
// highest score (all of them when several tie). It is the node choice the
// extender enforces in kube-scheduler (see docs/design.md, "Node choice") and
// the one the packing simulator replays; callers break ties themselves.
func BestNodes(decisions []Decision) []int {
	var best []int
	top := 0.0
	for i, d := range decisions {
		if !d.Fits {
			continue
		}
		switch {
		case len(best) == 0 || d.Score > top+ScoreTolerance:
			best = append(best[:0], i)
			top = d.Score
		case d.Score >= top-ScoreTolerance:
			best = append(best, i)
		}
	}
	return best
}

// ExtenderScores rescales the fitting nodes' scores to the extender
// protocol's 0..max range (kube-scheduler's MaxExtenderPriority is 10): the
// best node gets max, the worst fitting node 0, the rest in proportion,
// rounded to nearest. Nodes that do not fit get 0. When every fitting node
// scores the same, all get max.
func ExtenderScores(decisions []Decision, max int64) []int64 {
	out := make([]int64, len(decisions))
	lo, hi, any := 0.0, 0.0, false
	for _, d := range decisions {
		if !d.Fits {
			continue
		}
		if !any || d.Score < lo {
			lo = d.Score
		}
		if !any || d.Score > hi {
			hi = d.Score
		}
		any = true
	}
	for i, d := range decisions {
		if !d.Fits {
			continue
		}
		if hi-lo <= ScoreTolerance {
			out[i] = max
			continue
		}
		out[i] = int64((d.Score-lo)/(hi-lo)*float64(max) + 0.5)
	}
	return out
}
