package schedload

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/api"
)

// A fleet node is what the extender and kube-scheduler need to place a pod:
// Ready, without the not-ready taint the API server's admission adds, with a
// valid inventory whose units equal the allocatable gpu-mem.
func TestCreateNodesLeavesReadyUntaintedNodesWithInventory(t *testing.T) {
	client := fake.NewClientset()
	// The API server's TaintNodesByCondition admission, which the fake lacks.
	client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.CreateAction).GetObject().(*corev1.Node)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
		return false, nil, nil
	})
	f := Fleet{Prefix: "n", Nodes: 3, CardsPerNode: 8, CardUnits: 80}
	if err := CreateNodes(context.Background(), client, f, 2); err != nil {
		t.Fatal(err)
	}
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes.Items))
	}
	uuids := map[string]bool{}
	for _, n := range nodes.Items {
		if len(n.Spec.Taints) != 0 {
			t.Errorf("node %s keeps taints %v", n.Name, n.Spec.Taints)
		}
		if n.Labels[api.LabelEnabled] != "true" {
			t.Errorf("node %s lacks label %s=true", n.Name, api.LabelEnabled)
		}
		inv, err := api.DefaultNames().InventoryFromNode(&n)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		alloc := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		if inv.TotalUnits() != 640 || alloc.Value() != 640 {
			t.Errorf("node %s: inventory %d units, allocatable %d, want 640 both", n.Name, inv.TotalUnits(), alloc.Value())
		}
		for _, c := range inv.Cards {
			if uuids[c.UUID] {
				t.Errorf("card UUID %s appears twice in the fleet", c.UUID)
			}
			uuids[c.UUID] = true
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if !ready {
			t.Errorf("node %s not Ready: %v", n.Name, n.Status.Conditions)
		}
	}
}

// The heartbeat creates one lease per node, owned by the node, and renews it.
func TestHeartbeatCreatesAndRenewsLeases(t *testing.T) {
	client := fake.NewClientset()
	f := Fleet{Prefix: "n", Nodes: 2, CardsPerNode: 1, CardUnits: 80}
	ctx := context.Background()
	if err := CreateNodes(ctx, client, f, 2); err != nil {
		t.Fatal(err)
	}
	hb, err := StartHeartbeat(ctx, client, f, 10*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	first, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.Name(1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.OwnerReferences) != 1 || first.OwnerReferences[0].Name != f.Name(1) {
		t.Errorf("lease owners %v, want node %s", first.OwnerReferences, f.Name(1))
	}
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, false, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.Name(1), metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time), nil
	})
	if err != nil {
		t.Fatalf("lease not renewed within 10 s: %v", err)
	}
	if err := hb.Stop(); err != nil {
		t.Fatal(err)
	}
}

func boundPod(name, node string, uid types.UID, units int64) corev1.Pod {
	p := Burst{Namespace: "ns", Prefix: "p", Units: units, SchedulerName: "s"}.Pod(0)
	p.Name, p.UID, p.Spec.NodeName = name, uid, node
	return *p
}

func withRecord(t *testing.T, p corev1.Pod, node, uuid string, index int, units int64) corev1.Pod {
	t.Helper()
	s, err := api.EncodeAssignment(api.Assignment{
		Version: api.AssignmentVersion, PodUID: p.UID, Node: node, Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "app", CardUUID: uuid, CardIndex: index, Units: units}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	return p
}

func TestCheckAssignments(t *testing.T) {
	f := Fleet{Prefix: "n", Nodes: 2, CardsPerNode: 2, CardUnits: 16}
	nodes := map[string]*corev1.Node{}
	for _, name := range f.Names() {
		n, err := f.Node(name)
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	n0, n1 := f.Name(0), f.Name(1)
	card := func(node string, i int) string { return f.Inventory(node).Cards[i].UUID }
	tests := []struct {
		name     string
		pods     func(t *testing.T) []corev1.Pod
		problems []string // substrings, in order
		recorded int
	}{
		{
			name: "two pods filling a card exactly pass",
			pods: func(t *testing.T) []corev1.Pod {
				return []corev1.Pod{
					withRecord(t, boundPod("a", n0, "u-a", 8), n0, card(n0, 0), 0, 8),
					withRecord(t, boundPod("b", n0, "u-b", 8), n0, card(n0, 0), 0, 8),
				}
			},
			recorded: 2,
		},
		{
			name: "three 8 GiB pods on a 16 GiB card are over capacity",
			pods: func(t *testing.T) []corev1.Pod {
				return []corev1.Pod{
					withRecord(t, boundPod("a", n1, "u-a", 8), n1, card(n1, 1), 1, 8),
					withRecord(t, boundPod("b", n1, "u-b", 8), n1, card(n1, 1), 1, 8),
					withRecord(t, boundPod("c", n1, "u-c", 8), n1, card(n1, 1), 1, 8),
				}
			},
			problems: []string{"over capacity: 24 of 16 units"},
			recorded: 3,
		},
		{
			name: "an unbound pod, a pod without record, a record for another node, a card of another node",
			pods: func(t *testing.T) []corev1.Pod {
				unbound := boundPod("a", "", "u-a", 8)
				return []corev1.Pod{
					unbound,
					boundPod("b", n0, "u-b", 8),
					withRecord(t, boundPod("c", n0, "u-c", 8), n1, card(n1, 0), 0, 8),
					withRecord(t, boundPod("d", n0, "u-d", 8), n0, card(n1, 0), 0, 8),
				}
			},
			problems: []string{"pod b", "pod c", "pod d: container app assigned card GPU-n-00001-0, not in node n-00000's inventory", "1 of 4 pods not bound"},
		},
		{
			name: "a record whose index disagrees with the inventory",
			pods: func(t *testing.T) []corev1.Pod {
				return []corev1.Pod{withRecord(t, boundPod("a", n0, "u-a", 8), n0, card(n0, 1), 0, 8)}
			},
			problems: []string{"as index 0, the inventory says 1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods := tc.pods(t)
			r := checkAssignments(pods, pods, nodes)
			if len(r.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d like %q", r.Problems, len(tc.problems), tc.problems)
			}
			for i, want := range tc.problems {
				if !strings.Contains(r.Problems[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, r.Problems[i], want)
				}
			}
			if r.Recorded != tc.recorded {
				t.Errorf("recorded %d, want %d", r.Recorded, tc.recorded)
			}
		})
	}
}

func TestCheckBoundFindsUnboundPodsAndNodesOverAllocatable(t *testing.T) {
	f := Fleet{Prefix: "n", Nodes: 1, CardsPerNode: 1, CardUnits: 16}
	n, err := f.Node(f.Name(0))
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{n.Name: n}
	pods := []corev1.Pod{boundPod("a", n.Name, "a", 8), boundPod("b", n.Name, "b", 8), boundPod("c", n.Name, "c", 8), boundPod("d", "", "d", 8)}
	r := checkBound(pods, nodes)
	want := []string{"1 of 4 pods not bound", "node n-00000 over its allocatable example.com/gpu-mem: 24 asked, 16 allocatable"}
	if diff := cmp.Diff(want, r.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// The doc comment's worked example.
func TestQuantileInterpolatesInsideTheBucket(t *testing.T) {
	bs := []bucket{{0.01, 50}, {0.025, 90}, {0.05, 100}, {math.Inf(1), 100}}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.01}, {0.9, 0.025}, {0.99, 0.0475}} {
		if got := quantile(tc.q, bs, 100); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("q%.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(0.99, []bucket{{0.1, 1}, {math.Inf(1), 10}}, 10); got != 0.1 {
		t.Errorf("a rank in +Inf gives %v, want the last finite bound 0.1", got)
	}
	if got := quantile(0.5, bs, 0); !math.IsNaN(got) {
		t.Errorf("no observations gives %v, want NaN", got)
	}
}

// The doc comment's worked example, and a stalled burst.
func TestMeasureThroughput(t *testing.T) {
	start := time.Unix(0, 0)
	times := make([]time.Time, 2000)
	for i := range times {
		switch {
		case i < 199:
			times[i] = start.Add(time.Duration(i) * time.Millisecond)
		case i == 199:
			times[i] = start.Add(3 * time.Second)
		case i < 1799:
			times[i] = start.Add(3*time.Second + time.Duration(i)*time.Millisecond)
		case i == 1799:
			times[i] = start.Add(21 * time.Second)
		default:
			times[i] = start.Add(21*time.Second + time.Duration(i-1799)*time.Millisecond)
		}
	}
	times[1999] = start.Add(24 * time.Second)
	th := MeasureThroughput(start, times, 2000)
	if math.Abs(th.Overall-2000.0/24) > 1e-9 || math.Abs(th.Steady-1600.0/18) > 1e-9 {
		t.Errorf("overall %.3f steady %.3f, want %.3f and %.3f", th.Overall, th.Steady, 2000.0/24, 1600.0/18)
	}
	stalled := MeasureThroughput(start, times[:294], 2000)
	if stalled.Overall != 0 || stalled.Steady != 0 || stalled.Bound != 294 {
		t.Errorf("stalled burst: %+v, want no rates and 294 bound", stalled)
	}
	if got := BoundBy(start, times, 3*time.Second); got != 200 {
		t.Errorf("bound by 3 s: %d, want 200", got)
	}
}

func TestProcessCPUSecondsReadsThisProcess(t *testing.T) {
	s, err := ProcessCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s < 0 || s > 1e6 {
		t.Errorf("CPU seconds %v", s)
	}
}

func TestCountersByLabel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE gpushare_extender_node_decisions_total counter\n"+
			"gpushare_extender_node_decisions_total{source=\"evaluated\"} 12\n"+
			"gpushare_extender_node_decisions_total{source=\"memo\"} 9988\n")
	}))
	defer srv.Close()
	m, err := Scrape(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Counters(MetricNodeDecisions, "source"), map[string]float64{"evaluated": 12, "memo": 9988}; !maps.Equal(got, want) {
		t.Errorf("Counters = %v, want %v", got, want)
	}
	if got := m.Counters(MetricBinds, "outcome"); len(got) != 0 {
		t.Errorf("an absent family gave %v", got)
	}
}

// The peak RSS is VmHWM in bytes; a status without it, or in another unit,
// is an error; this process's own is read and positive.
func TestPeakRSS(t *testing.T) {
	status := "Name:\tgpushare-scheduler\nVmPeak:\t 2000000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
	if got, err := peakRSS(status); err != nil || got != 123456*1024 {
		t.Errorf("peakRSS = %d, %v; want %d", got, err, 123456*1024)
	}
	for _, bad := range []string{"VmRSS:\t 100 kB\n", "VmHWM:\t 100 MB\n", "VmHWM:\t x kB\n"} {
		if got, err := peakRSS(bad); err == nil {
			t.Errorf("peakRSS(%q) = %d; want an error", bad, got)
		}
	}
	if got, err := ProcessPeakRSS(os.Getpid()); err != nil || got <= 0 {
		t.Errorf("ProcessPeakRSS(self) = %d, %v", got, err)
	}
}
