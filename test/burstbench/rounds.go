package burstbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// A ratio of two p90s, each from one burst of 100 pods on a machine the
// cluster's programs share, moves by half from one suite to the next (the
// playground's GPU-alone ratio: 1.03× and 2.92× in two suites run one after
// the other). So the bench runs the suite several times (rounds) and judges
// each ratio by its median over the rounds, each round's ratio taken within
// the round (its bursts ran minutes apart, on the same machine state).

// judged are the ratios Judge checks, by their line in its answer.
var judged = []struct {
	name string
	mix  Mix
	kind string
}{{"GPU alone, GPU p90", GPUOnly, GPU}, {"mixed, GPU p90", Interleaved, GPU}, {"mixed, no-GPU p90", Interleaved, Plain}}

// RoundRatios are each judged ratio's values over the rounds (a round
// without the figure is left out of that ratio).
func RoundRatios(rounds [][]Result) map[string][]float64 {
	out := map[string][]float64{}
	for _, results := range rounds {
		by := map[Mix]Result{}
		for _, r := range results {
			by[r.Mix] = r
		}
		base := by[PlainOnly].Stats[Plain].CreateToReady.P90
		for _, j := range judged {
			if p90 := by[j.mix].Stats[j.kind].CreateToReady.P90; base > 0 && p90 > 0 {
				out[j.name] = append(out[j.name], float64(p90)/float64(base))
			}
		}
	}
	return out
}

// median is the middle value (the mean of the two middle ones).
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// JudgeRounds says whether suites run one after the other meet the target:
// every pod of every round Ready (Judge's (a), each round), and each judged
// ratio's median over the rounds at most Target.
func JudgeRounds(rounds [][]Result) (met bool, why []string) {
	for i, results := range rounds {
		_, w := Judge(results)
		for _, l := range w {
			if !strings.Contains(l, "× the no-GPU-alone p90") { // the ratios are judged below, on their median
				why = append(why, fmt.Sprintf("round %d: %s", i+1, l))
			}
		}
	}
	for i, results := range rounds {
		if n, of := recorded(results); n > 0 {
			why = append(why, fmt.Sprintf("round %d: not judged: %d of %d pods carry the node agents' container records; measure on `make playground CONTAINER_RECORDS=0`", i+1, n, of))
		}
	}
	ratios := RoundRatios(rounds)
	for _, j := range judged {
		if v := ratios[j.name]; len(v) > 0 && median(v) > Target {
			why = append(why, fmt.Sprintf("%s: median %.2f× the no-GPU-alone p90 over %d rounds (target ≤ %.1f×)", j.name, median(v), len(v), Target))
		}
	}
	return len(why) == 0, why
}

// WriteRounds prints each judged ratio round by round with its median, and
// the verdict over the rounds (JudgeRounds).
func WriteRounds(w io.Writer, rounds [][]Result) bool {
	fmt.Fprintf(w, "\nover %d rounds, each ratio to its own round's no-GPU-alone p90:\n", len(rounds))
	ratios := RoundRatios(rounds)
	for _, j := range judged {
		var vs []string
		for _, v := range ratios[j.name] {
			vs = append(vs, fmt.Sprintf("%.2f", v))
		}
		if len(vs) > 0 {
			fmt.Fprintf(w, "  %-18s %s: median %.2f×\n", j.name, strings.Join(vs, ", "), median(ratios[j.name]))
		}
	}
	met, why := JudgeRounds(rounds)
	if met {
		fmt.Fprintf(w, "target over the rounds (every pod Ready; median GPU-alone and mixed p90s ≤ %.1f× the no-GPU-alone p90): met\n", Target)
		return true
	}
	fmt.Fprintf(w, "target over the rounds (every pod Ready; median GPU-alone and mixed p90s ≤ %.1f× the no-GPU-alone p90): not met\n", Target)
	for _, l := range why {
		fmt.Fprintf(w, "  %s\n", l)
	}
	return false
}
