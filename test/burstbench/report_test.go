package burstbench

import (
	"fmt"
	"reflect"
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
	if r := float64(g.CreateToReady.P90) / float64(p.CreateToReady.P90); r != 1.9 {
		t.Errorf("ratio = %v, want 1.9", r)
	}
}

// burst is a burst's stats where every pod of each kind is Ready, with the
// given p90 create → Ready (zero: the kind is absent).
func burst(m Mix, plainP90, gpuP90 time.Duration) Result {
	r := Result{Mix: m, Stats: map[string]Stats{}}
	if plainP90 > 0 {
		r.Stats[Plain] = Stats{Kind: Plain, Pods: 100, Ready: 100, CreateToReady: Percentiles{N: 100, P50: plainP90 / 2, P90: plainP90, Max: plainP90}}
	}
	if gpuP90 > 0 {
		r.Stats[GPU] = Stats{Kind: GPU, Pods: 100, Ready: 100, CreateToReady: Percentiles{N: 100, P50: gpuP90 / 2, P90: gpuP90, Max: gpuP90}}
	}
	return r
}

// The verdict compares every figure with the no-GPU-alone p90, so a mixed
// burst where both kinds wait behind the GPU pods (a ratio near 1 between
// them) is not met; a pod that is not Ready fails it too.
func TestJudge(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name    string
		results []Result
		met     bool
		want    string
	}{
		{name: "node pace for both kinds", met: true, results: []Result{burst(PlainOnly, 5*s, 0), burst(GPUOnly, 0, 5500*time.Millisecond), burst(Interleaved, 6*s, 6*s)}},
		{name: "both kinds slow in the mixed burst: the old ratio was 0.8", results: []Result{burst(PlainOnly, 5*s, 0), burst(GPUOnly, 0, 40*s), burst(Interleaved, 240*s, 192*s)},
			want: "mixed: no GPU p90 240.00s is 48.00× the no-GPU-alone p90 5.00s"},
		{name: "GPU alone slow", results: []Result{burst(PlainOnly, 5*s, 0), burst(GPUOnly, 0, 7*s), burst(Interleaved, 5*s, 5*s)}, want: "GPU alone: GPU p90 7.00s is 1.40×"},
		{name: "a GPU pod never Ready", results: func() []Result {
			r := []Result{burst(PlainOnly, 5*s, 0), burst(GPUOnly, 0, 5*s), burst(Interleaved, 5*s, 5*s)}
			g := r[2].Stats[GPU]
			g.Ready = 99
			r[2].Stats[GPU] = g
			return r
		}(), want: "mixed: 99 of 100 GPU pods Ready"},
		{name: "no baseline", results: []Result{burst(GPUOnly, 0, 5*s), burst(Interleaved, 5*s, 5*s)}, want: "no-GPU alone: not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			met, why := Judge(tc.results)
			if met != tc.met || (tc.want != "" && !strings.Contains(strings.Join(why, "\n"), tc.want)) {
				t.Errorf("Judge = %v, %q; want %v and a reason containing %q", met, why, tc.met, tc.want)
			}
			var b strings.Builder
			if got := WriteSuite(&b, Options{Pods: 100, GiB: 4, Clients: 16}, tc.results); got != tc.met {
				t.Errorf("WriteSuite = %v, want %v:\n%s", got, tc.met, b.String())
			}
		})
	}
}

// Every burst creates the same number of pods, the mixed one half of each
// kind alternating, so that its p90s compare with the no-GPU-alone burst's
// on the same load, not on twice the pods.
func TestEveryBurstCreatesAsManyPods(t *testing.T) {
	for _, m := range []Mix{PlainOnly, GPUOnly, Interleaved} {
		count := map[string]int{}
		for _, k := range m.kinds(100) {
			count[k.kind]++
		}
		want := map[Mix]map[string]int{PlainOnly: {Plain: 100}, GPUOnly: {GPU: 100}, Interleaved: {Plain: 50, GPU: 50}}[m]
		if count[Plain] != want[Plain] || count[GPU] != want[GPU] {
			t.Errorf("%s burst of 100: %v; want %v", m, count, want)
		}
	}
	if k := Interleaved.kinds(4); k[0].kind != Plain || k[1].kind != GPU || k[2].i != 1 {
		t.Errorf("mixed burst order %v; want the kinds alternating, numbered within each kind", k)
	}
}

// A node's pace: its pods, their bound → Ready p90, and pods Ready per
// second from its first bound pod to its last Ready one.
func TestNodePaces(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	pods := map[string]*Timeline{
		"a": {Kind: GPU, Node: "n1", Bound: at(0), Ready: at(100)},
		"b": {Kind: GPU, Node: "n1", Bound: at(50), Ready: at(500)},
		"c": {Kind: Plain, Node: "n2", Bound: at(0), Ready: at(250)},
		"d": {Kind: Plain, Node: "", Bound: at(0)}, // never bound: not counted
	}
	got := NodePaces(pods)
	want := []NodePace{{Node: "n1", Kind: GPU, Pods: 2, BoundToReady: 450 * time.Millisecond, PerSecond: 4}, {Node: "n2", Kind: Plain, Pods: 1, BoundToReady: 250 * time.Millisecond, PerSecond: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NodePaces = %+v, want %+v", got, want)
	}
}

// Figures that meet the target are not judged met when the node agents
// wrote their container records: a write per pod that a kubelet does not
// make, which slows the baseline as much as the GPU pods and so flatters
// the ratio.
func TestContainerRecordsAreNotJudged(t *testing.T) {
	s := time.Second
	results := []Result{burst(PlainOnly, 5*s, 0), burst(GPUOnly, 0, 5*s), burst(Interleaved, 5*s, 5*s)}
	results[0].Pods = map[string]*Timeline{"plain-0": {Kind: Plain}, "plain-1": {Kind: Plain, Recorded: true}}
	var b strings.Builder
	if WriteSuite(&b, Options{Pods: 100, GiB: 4, Clients: 16}, results) {
		t.Errorf("met with container records on 1 of 2 pods:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "not judged: 1 of 2 pods carry the node agents' container records") || !strings.Contains(b.String(), "CONTAINER_RECORDS=0") {
		t.Errorf("the report does not say why, nor how to measure without:\n%s", b.String())
	}
	results[0].Pods["plain-1"].Recorded = false
	if b.Reset(); !WriteSuite(&b, Options{Pods: 100, GiB: 4, Clients: 16}, results) {
		t.Errorf("not met without container records:\n%s", b.String())
	}
}

// The device floor is printed beside the verdict, each GPU figure as a
// multiple of it, and never decides the verdict.
func TestFloorIsPrintedNotJudged(t *testing.T) {
	s := time.Second
	floor := Result{Mix: DeviceFloor, Stats: map[string]Stats{Floor: {Kind: Floor, Pods: 100, Ready: 90, CreateToReady: Percentiles{N: 90, P50: s, P90: 4 * s, Max: 5 * s}}}}
	results := []Result{burst(PlainOnly, 5*s, 0), floor, burst(GPUOnly, 0, 6*s), burst(Interleaved, 5*s, 5*s)}
	var b strings.Builder
	if !WriteSuite(&b, Options{Pods: 100, GiB: 4, Clients: 16, FloorResource: "example.com/floor"}, results) {
		t.Errorf("not met (a floor with pods not Ready, or slower than the GPU pods, decided it):\n%s", b.String())
	}
	for _, want := range []string{"device floor (not judged): pods asking 4 example.com/floor", "p90 4.00s", "GPU alone, GPU p90: 1.50× the floor", "mixed, no GPU p90: 1.25× the floor"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
