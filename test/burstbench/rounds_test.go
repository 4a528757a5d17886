package burstbench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// round is one suite: the no-GPU-alone p90 base, GPU alone gpu, mixed both kinds mixed.
func round(base, gpu, mixed time.Duration) []Result {
	return []Result{burst(PlainOnly, base, 0), burst(GPUOnly, 0, gpu), burst(Interleaved, mixed, mixed)}
}

// One round that happens to meet the target does not make a suite of three
// meet it, nor does one outlier round fail it: each ratio is taken within its
// round (a slow round's GPU p90 against that round's own baseline) and judged
// by its median.
func TestRoundsAreJudgedOnTheMedianRatio(t *testing.T) {
	s := time.Second
	tests := []struct {
		name   string
		rounds [][]Result
		met    bool
		why    string
	}{
		{"one lucky round of three", [][]Result{round(s, 1050*time.Millisecond, s), round(s, 2*s, s), round(s, 1900*time.Millisecond, s)}, false,
			"GPU alone, GPU p90: median 1.90× the no-GPU-alone p90 over 3 rounds"},
		{"one outlier round of three", [][]Result{round(s, 1100*time.Millisecond, s), round(2*s, 2300*time.Millisecond, 2*s), round(s/2, 1500*time.Millisecond, s/2)}, true, ""},
		{"a pod never Ready in one round", [][]Result{round(s, s, s), func() []Result {
			r := round(s, s, s)
			st := r[1].Stats[GPU]
			st.Ready--
			r[1].Stats[GPU] = st
			return r
		}(), round(s, s, s)}, false, "round 2: GPU alone: 99 of 100 GPU pods Ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			met, why := JudgeRounds(tc.rounds)
			if met != tc.met || (tc.why != "" && !strings.Contains(strings.Join(why, "\n"), tc.why)) {
				t.Errorf("JudgeRounds = %v %q, want %v and a line %q", met, why, tc.met, tc.why)
			}
			var out bytes.Buffer
			if WriteRounds(&out, tc.rounds) != tc.met {
				t.Errorf("WriteRounds disagrees with JudgeRounds:\n%s", out.String())
			}
		})
	}
	if got := RoundRatios([][]Result{round(2*s, 2300*time.Millisecond, s)})["GPU alone, GPU p90"]; len(got) != 1 || got[0] != 1.15 {
		t.Errorf("a round's ratio = %v, want 1.15 (its GPU p90 over its own baseline)", got)
	}
}
