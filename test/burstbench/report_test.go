package burstbench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPercentilesAreNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	got := percentiles(ds)
	want := Percentiles{N: 10, P50: 5 * time.Second, P90: 9 * time.Second, Max: 10 * time.Second}
	if got != want {
		t.Errorf("percentiles(10..1 s) = %+v, want %+v", got, want)
	}
	if got := percentiles([]time.Duration{3 * time.Second}); got.P50 != 3*time.Second || got.P90 != 3*time.Second {
		t.Errorf("one value: %+v", got)
	}
	if got := percentiles(nil); got != (Percentiles{}) {
		t.Errorf("none: %+v", got)
	}
}

// A burst where the GPU pods take twice as long from bind to Ready: each
// kind's figures from the timelines, the ratio 2 and "not met"; a pod never
// Ready counts in Pods, not in the percentiles; a Failed one is counted.
func TestSummarizeAndReport(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	pods := map[string]*Timeline{}
	for i := range 10 {
		c := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		pods[fmt.Sprintf("plain-%d", i)] = &Timeline{Kind: Plain, Created: c, Bound: c.Add(time.Second), Ready: c.Add(time.Second + time.Duration(i+1)*time.Second)}
		pods[fmt.Sprintf("gpu-%d", i)] = &Timeline{Kind: GPU, Created: c, Bound: c.Add(time.Second), Ready: c.Add(time.Second + time.Duration(2*(i+1))*time.Second)}
	}
	pods["gpu-stuck"] = &Timeline{Kind: GPU, Created: t0, Bound: t0.Add(time.Second)}
	pods["gpu-failed"] = &Timeline{Kind: GPU, Created: t0, Failed: true, FailedReason: "UnexpectedAdmissionError: x"}
	stats := Summarize(pods)
	p, g := stats[Plain], stats[GPU]
	if p.Pods != 10 || p.Ready != 10 || g.Pods != 12 || g.Ready != 10 || g.Failed != 1 {
		t.Fatalf("plain %+v\ngpu %+v", p, g)
	}
	if p.CreateToReady.P90 != 10*time.Second || g.CreateToReady.P90 != 19*time.Second || g.BoundToReady.P90 != 18*time.Second || g.CreateToBound.P50 != time.Second {
		t.Errorf("p90s: plain %v, gpu %v (bound→Ready %v, create→bound p50 %v); want 10s, 19s, 18s, 1s", p.CreateToReady.P90, g.CreateToReady.P90, g.BoundToReady.P90, g.CreateToBound.P50)
	}
	if want := 900*time.Millisecond + 21*time.Second; g.Span != want {
		t.Errorf("GPU first create → last Ready = %v, want %v", g.Span, want)
	}
	if r := Ratio(stats); r != 1.9 {
		t.Errorf("ratio = %v, want 1.9", r)
	}
	var b strings.Builder
	WriteReport(&b, Options{Pods: 10, GiB: 4, Clients: 2}, stats)
	if out := b.String(); !strings.Contains(out, "1.900 (target ≤ 1.2: not met)") || !strings.Contains(out, "GPU 4 GiB") {
		t.Errorf("report:\n%s", out)
	}
}
