package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// tinyNodes is one node with two cards and 10 cores.
const tinyNodes = `sn,cpu_milli,memory_mib,gpu,model
n0,10000,65536,2,T4
`

// tinyPods: a full card, a 600-milli share, two whole cards, and a CPU-only
// pod too big for the node's CPU.
const tinyPods = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec
a,1000,1024,1,1000,
b,1000,1024,1,600,T4
d,1000,1024,2,1000,
c,20000,1024,0,0,
`

func tinyTrace(t *testing.T) *Trace {
	t.Helper()
	nodes, err := ReadNodes(strings.NewReader(tinyNodes), FormatOpenb)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPods(strings.NewReader(tinyPods), FormatOpenb)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trace{Name: "tiny", Nodes: nodes, Pods: pods, WholeCardUnits: OpenbCardUnits}
	if err := tr.validate(); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestReadOpenb(t *testing.T) {
	tr := tinyTrace(t)
	if got, want := tr.Capacity(), int64(2000); got != want {
		t.Errorf("capacity = %d, want %d", got, want)
	}
	want := []PodSpec{
		{Name: "a", CPUMilli: 1000, MemoryMiB: 1024, Units: 1000},
		{Name: "b", CPUMilli: 1000, MemoryMiB: 1024, Units: 600, Models: []string{"T4"}},
		{Name: "d", CPUMilli: 1000, MemoryMiB: 1024, WholeCards: 2},
		{Name: "c", CPUMilli: 20000, MemoryMiB: 1024},
	}
	if diff := cmp.Diff(want, tr.Pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	// GPU request: a share counts its units, whole cards 1,000 each.
	if got := tr.GPURequest(tr.Pods[2]); got != 2000 {
		t.Errorf("request of 2 whole cards = %d, want 2000", got)
	}
}

func TestReadMemoryFormat(t *testing.T) {
	nodes, err := ReadNodes(strings.NewReader("name,cpu_milli,memory_mib,gpu,model,card_gib\nn1,32000,131072,2,T4,16\n"), FormatMemory)
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []NodeSpec{{Name: "n1", CPUMilli: 32000, MemoryMiB: 131072, Cards: []CardSpec{{"T4", 16}, {"T4", 16}}}}
	if diff := cmp.Diff(wantNodes, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	pods, err := ReadPods(strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_gib,gpu_spec\np1,4000,8192,1,6,\np2,1000,1024,2,0,T4|A10\n"), FormatMemory)
	if err != nil {
		t.Fatal(err)
	}
	wantPods := []PodSpec{
		{Name: "p1", CPUMilli: 4000, MemoryMiB: 8192, Units: 6},
		{Name: "p2", CPUMilli: 1000, MemoryMiB: 1024, WholeCards: 2, Models: []string{"T4", "A10"}},
	}
	if diff := cmp.Diff(wantPods, pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

func TestReadRejectsBadRows(t *testing.T) {
	for name, in := range map[string]string{
		"negative cpu":          "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,-1,0,0,0\n",
		"one gpu of no share":   "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,0,1,0\n",
		"missing gpu_milli col": "name,cpu_milli,memory_mib,num_gpu\np,1,0,1\n",
	} {
		if _, err := ReadPods(strings.NewReader(in), FormatOpenb); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestArrivalsShuffleThenInflateToTarget(t *testing.T) {
	tr := tinyTrace(t)
	// The trace asks for 1000+600+2000 = 3600 units of 2000: already 180%,
	// so at 130% no copy is added, only the order changes.
	got := arrivals(tr, 42, 1.3)
	if len(got) != 4 {
		t.Fatalf("%d arrivals at 130%%, want the 4 trace pods", len(got))
	}
	// At 300% (6000 units) copies are appended until the request reaches it.
	got = arrivals(tr, 42, 3.0)
	var names []string
	var total int64
	for _, p := range got {
		names = append(names, p.Name)
		total += tr.GPURequest(p)
	}
	first := slices.Clone(names[:4])
	slices.Sort(first)
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, first); diff != "" {
		t.Errorf("the first arrivals are not a permutation of the trace (-want +got):\n%s", diff)
	}
	if total < 6000 {
		t.Errorf("total request %d after inflation, want ≥ 6000", total)
	}
	last := got[len(got)-1]
	if total-tr.GPURequest(last) >= 6000 {
		t.Errorf("the last copy (%s) was not needed: %d before it", last.Name, total-tr.GPURequest(last))
	}
	// Same seed, same arrivals; another seed, another order.
	if diff := cmp.Diff(got, arrivals(tr, 42, 3.0)); diff != "" {
		t.Errorf("arrivals are not reproducible:\n%s", diff)
	}
}

func TestReplayPlacesFailsAndDrawsTheCurve(t *testing.T) {
	tr := tinyTrace(t)
	binpack, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	// Order a, b, d, c on one node with two 1,000-unit cards and 10 cores:
	//   a (1000) takes card 0: arrived 1000 = 50%, allocated 50%;
	//   b (600) takes card 1:  arrived 1600 = 80%, allocated 80%;
	//   d (2 whole cards) fails, no unused card: arrived 3600 = 180%;
	//   c (CPU-only, 20 cores) fails the CPU filter.
	// So the curve is 50 up to 50% arrival, 80 from 51% to 130%, and
	// unallocated at 100% is 20.
	run := replayPods(tr, binpack, 0, tr.Pods)
	if run.Failed != 2 || run.Pods != 4 {
		t.Errorf("pods %d failed %d, want 4 and 2", run.Pods, run.Failed)
	}
	if run.FailedAt100 != 0 {
		t.Errorf("failed before 100%% arrival = %d, want 0 (d arrives at 180%%)", run.FailedAt100)
	}
	want := make([]float64, CurveSteps)
	for k := 1; k < CurveSteps; k++ {
		if k <= 50 {
			want[k] = 50
		} else {
			want[k] = 80
		}
	}
	if diff := cmp.Diff(want, run.Curve); diff != "" {
		t.Errorf("curve (-want +got):\n%s", diff)
	}
	if got := run.UnallocatedAt100(); got != 20 {
		t.Errorf("unallocated at 100%% = %v, want 20", got)
	}
}

func TestReplayCountsFailuresBeforeFullArrival(t *testing.T) {
	tr := tinyTrace(t)
	binpack, _ := registry.Lookup("binpack")
	// c first (fails on CPU at 0% arrival), then a: one failure before 100%.
	run := replayPods(tr, binpack, 0, []PodSpec{tr.Pods[3], tr.Pods[0]})
	if run.Failed != 1 || run.FailedAt100 != 1 {
		t.Errorf("failed %d (at 100%%: %d), want 1 and 1", run.Failed, run.FailedAt100)
	}
}

func TestSummarizeAveragesSeeds(t *testing.T) {
	a := Run{Trace: "t", Policy: "p", Failed: 1, Curve: make([]float64, CurveSteps)}
	b := Run{Trace: "t", Policy: "p", Failed: 3, Curve: make([]float64, CurveSteps)}
	a.Curve[100], b.Curve[100] = 90, 94
	s := Summarize([]Run{a, b})
	if s.UnallocatedAt100 != 8 || s.FailedPods != 2 || s.AllocatedAt["100"] != 92 {
		t.Errorf("summary = %+v, want unallocated 8, failed 2, allocated@100 92", s)
	}
}

func TestPlotWritesAPNG(t *testing.T) {
	curve := make([]float64, CurveSteps)
	for k := range curve {
		curve[k] = min(float64(k), 93)
	}
	var buf bytes.Buffer
	if err := Plot(&buf, []Series{{Name: "binpack", Curve: curve}, {Name: "anchor", Curve: curve, Dashed: true}}, "tiny"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 {
		t.Errorf("image is %v, too small to read", b)
	}
}

func TestMainReplaysATraceDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "openb"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"openb/openb_node_list_gpu_node.csv": tinyNodes,
		"openb/openb_pod_list_tiny.csv":      tinyPods,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	png := filepath.Join(dir, "curves.png")
	err := Main(t.Context(), Options{TracesDir: dir, Workloads: []string{"tiny"}, Policies: []string{"binpack", "frag"},
		FirstSeed: 42, Seeds: 2, Output: "json", Parallel: 2, PNG: png, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a JSON report: %v\n%s", err, out.String())
	}
	if len(rep.Runs) != 4 || len(rep.Summaries) != 2 || rep.Summaries[1].Policy != "frag" || rep.Runs[1].Seed != 43 {
		t.Errorf("report has %d runs and summaries %+v, want 4 runs (2 policies × seeds 42, 43)", len(rep.Runs), rep.Summaries)
	}
	if _, err := os.Stat(png); err != nil {
		t.Errorf("no PNG: %v", err)
	}
	if err := Main(t.Context(), Options{TracesDir: dir, Workloads: []string{"tiny"}, Policies: []string{"nope"}, Seeds: 1, Output: "table", Stdout: &out}); err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Errorf("unknown policy: err = %v", err)
	}
}

func TestNodesToFindIsKubeSchedulers(t *testing.T) {
	for _, tc := range []struct{ percent, nodes, want int }{
		{100, 5000, 5000}, // every node
		{0, 5000, 500},    // adaptive (shipped): 50 − 5000/125 = 10 %
		{0, 1000, 420},    // adaptive: 50 − 8 = 42 %
		{0, 1213, 497},    // openb's cluster: 50 − 9 = 41 %
		{0, 50000, 2500},  // adaptive floor: 5 %
		{10, 500, 100},    // never fewer than 100
		{10, 80, 80},      // fewer than 100 nodes: all
	} {
		if got := NodesToFind(tc.percent, tc.nodes); got != tc.want {
			t.Errorf("NodesToFind(%d, %d) = %d, want %d", tc.percent, tc.nodes, got, tc.want)
		}
	}
}

// A sample of the nodes, searched round the list from where the last
// search stopped, is what a percentageOfNodesToScore below 100 gives the
// extender: binpack then packs within each window instead of cluster-wide.
func TestReplaySampledSearchesWindowsRoundTheNodes(t *testing.T) {
	tr := &Trace{Name: "windows", WholeCardUnits: OpenbCardUnits}
	for i := 0; i < 400; i++ {
		tr.Nodes = append(tr.Nodes, NodeSpec{Name: fmt.Sprintf("n%03d", i), CPUMilli: 64000, MemoryMiB: 1 << 20,
			Cards: []CardSpec{{Model: "V100", Capacity: 1000}}})
	}
	var pods []PodSpec
	for i := 0; i < 4; i++ {
		pods = append(pods, PodSpec{Name: fmt.Sprintf("p%d", i), CPUMilli: 1000, MemoryMiB: 1024, Units: 100})
	}
	tr.Pods = pods
	if err := tr.validate(); err != nil {
		t.Fatal(err)
	}
	binpack, _ := registry.Lookup("binpack")
	// used replays the pods and returns the nodes that got one.
	used := func(percent int) []string {
		t.Helper()
		c := newCluster(tr)
		if run := c.replay(tr, binpack, 0, pods, percent, allocator.WorkloadTolerance); run.Failed != 0 {
			t.Fatalf("percent %d: %d pods failed", percent, run.Failed)
		}
		var out []string
		for _, n := range c.nodes {
			if n.Cards[0].Used > 0 {
				out = append(out, n.Name)
			}
		}
		return out
	}
	// Every node: binpack stacks the four pods on one card.
	if diff := cmp.Diff([]string{"n000"}, used(100)); diff != "" {
		t.Errorf("percent 100 (-want +got):\n%s", diff)
	}
	// 25 % of 400 = 100 nodes a cycle: the first pod sees n000-n099, the
	// second n100-n199, …: one pod per window.
	if diff := cmp.Diff([]string{"n000", "n100", "n200", "n300"}, used(25)); diff != "" {
		t.Errorf("percent 25 (-want +got):\n%s", diff)
	}
}

// The workload the policy reads lags the pods seen as the extender's cache
// lets it: with tolerance 0 a new value whenever a shape's share moves, with
// more tolerance fewer, never fewer than one per shape (a new shape always
// gives one). ReplaySampled replays with the extender's tolerance.
func TestReplayModelHandsOutFewerWorkloadsTheMoreTheyLag(t *testing.T) {
	tr := tinyTrace(t)
	frag, err := registry.Lookup("frag")
	if err != nil {
		t.Fatal(err)
	}
	exact := ReplayModel(tr, frag, 42, 40, 100, 0)
	lagging := ReplayModel(tr, frag, 42, 40, 100, 0.01)
	loose := ReplayModel(tr, frag, 42, 40, 100, 0.5)
	t.Logf("%d pods: %d workloads exact, %d at 0.01, %d at 0.5", exact.Pods, exact.Workloads, lagging.Workloads, loose.Workloads)
	if exact.Pods < 50 {
		t.Fatalf("only %d pods: inflate more", exact.Pods)
	}
	if !(exact.Workloads > lagging.Workloads && lagging.Workloads >= loose.Workloads && loose.Workloads >= 4) {
		t.Errorf("workloads handed out: exact %d, 0.01 %d, 0.5 %d; want exact > 0.01 ≥ 0.5 ≥ 4 (one per shape)", exact.Workloads, lagging.Workloads, loose.Workloads)
	}
	if exact.Workloads < exact.Pods/2 {
		t.Errorf("exact: %d workloads for %d pods; a share moves with almost every pod", exact.Workloads, exact.Pods)
	}
	if diff := cmp.Diff(ReplayModel(tr, frag, 42, 40, 100, allocator.WorkloadTolerance), ReplaySampled(tr, frag, 42, 40, 100)); diff != "" {
		t.Errorf("ReplaySampled is not ReplayModel with the extender's tolerance:\n%s", diff)
	}
}

// Scaled is the same cluster and workload k times over: k× the nodes, pods,
// cards and capacity, every name distinct, the proportions kept, so a full
// replay packs it as well as the original (each copy's pods fit each copy's
// nodes).
func TestScaledIsTheSameWorkloadOnALargerCluster(t *testing.T) {
	tr := tinyTrace(t)
	if got := tr.Scaled(1); got != tr {
		t.Errorf("Scaled(1) made a copy; want the trace itself")
	}
	s := tr.Scaled(3)
	if err := s.validate(); err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 3*len(tr.Nodes) || len(s.Pods) != 3*len(tr.Pods) || s.Cards() != 3*tr.Cards() || s.Capacity() != 3*tr.Capacity() {
		t.Errorf("Scaled(3): %d nodes, %d pods, %d cards, capacity %d; want 3× %d, %d, %d, %d",
			len(s.Nodes), len(s.Pods), s.Cards(), s.Capacity(), len(tr.Nodes), len(tr.Pods), tr.Cards(), tr.Capacity())
	}
	names := map[string]bool{}
	for _, n := range s.Nodes {
		names["node "+n.Name] = true
	}
	for _, p := range s.Pods {
		names["pod "+p.Name] = true
	}
	if len(names) != len(s.Nodes)+len(s.Pods) {
		t.Errorf("Scaled(3) repeats names: %d distinct of %d", len(names), len(s.Nodes)+len(s.Pods))
	}
	if s.Name != "tiny_x3" || s.WholeCardUnits != tr.WholeCardUnits || s.Unit != tr.Unit {
		t.Errorf("Scaled(3): name %q, whole card %d, unit %q; want tiny_x3 and the trace's", s.Name, s.WholeCardUnits, s.Unit)
	}
	if tr.Nodes[0].Name != "n0" || len(tr.Nodes) != 1 {
		t.Errorf("Scaled changed the trace it was called on: %+v", tr.Nodes)
	}
	binpack, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	one, three := Replay(tr, binpack, 1, 1), Replay(s, binpack, 1, 1)
	if one.UnallocatedAt100() != three.UnallocatedAt100() {
		t.Errorf("unallocated at 100%%: %.2f on the trace, %.2f on it 3× over; want the same", one.UnallocatedAt100(), three.UnallocatedAt100())
	}
}

// Replay is ReplaySampled of every node (percent 100).
func Replay(t *Trace, p *allocator.Policy, seed int64, inflate float64) Run {
	return ReplaySampled(t, p, seed, inflate, 100)
}

// replayPods places pods in order, every node a candidate.
func replayPods(t *Trace, p *allocator.Policy, seed int64, pods []PodSpec) Run {
	return replayPodsSampled(t, p, seed, pods, 100)
}
