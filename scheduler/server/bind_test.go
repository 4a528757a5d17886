package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func bindArgs(pod *corev1.Pod, node string) *extenderv1.ExtenderBindingArgs {
	return &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node}
}

func TestBindWritesOneBindingCarryingTheAssignment(t *testing.T) {
	// A stale annotation (another pod's record) must be overwritten.
	stale := podtest.AssignmentFor(podtest.Make("ns", "p").GPU("a", 10).GPU("b", 30).Obj(), "n1", api.PhaseAllocated, 0, 0)
	stale.PodUID = "someone-else"
	pod := podtest.Make("ns", "p").GPU("a", 10).GPU("b", 30).Annotation(api.DefaultNames().AnnotationAssignment(), podtest.MustEncode(stale)).Obj()
	resident := podtest.Make("ns", "resident").GPU("main", 30).AssignOn("n1", api.PhaseAllocated, 1).Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj()}, pod, resident)

	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != "" {
		t.Fatalf("bind failed: %s", res.Error)
	}
	// One request: the record travels in the Binding's annotations, which
	// the API server copies onto the pod with spec.nodeName.
	if diff := cmp.Diff([]string{"create pods/binding p"}, e.writes()); diff != "" {
		t.Errorf("API writes, in order (-want +got):\n%s", diff)
	}
	if b := e.lastBinding(t); b.Annotations[api.DefaultNames().AnnotationAssignment()] == "" || b.UID != pod.UID {
		t.Errorf("Binding %+v: want the assignment in its annotations and the pod's UID as precondition", b.ObjectMeta)
	}
	got := e.apiPod(t, "p")
	if got.Spec.NodeName != "n1" {
		t.Errorf("pod bound to %q, want n1", got.Spec.NodeName)
	}
	// Best fit: b (30, the hardest) can only go to card 0 (free 40; card 1
	// has 10), leaving 10; then a (10) fits exactly on either card, and the
	// lowest index wins the tie.
	want := api.Assignment{Version: 1, PodUID: pod.UID, Node: "n1", Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{
			{Name: "a", CardUUID: podtest.CardUUID("n1", 0), CardIndex: 0, Units: 10},
			{Name: "b", CardUUID: podtest.CardUUID("n1", 0), CardIndex: 0, Units: 30},
		}}
	if diff := cmp.Diff(want, assignment(t, got)); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
	if st, _ := e.cache.PodState(pod.UID); st != cache.Assumed {
		t.Errorf("cache state %q, want assumed until the informer confirms", st)
	}
	if diff := cmp.Diff(map[int]int64{0: 40, 1: 30}, e.usedOn("n1")); diff != "" {
		t.Errorf("cache used (-want +got):\n%s", diff)
	}
	if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcomeBound)); n != 1 {
		t.Errorf("bound counter = %v, want 1", n)
	}
}

func TestBindFailuresWriteNothing(t *testing.T) {
	node := fixture.MakeNode("n1").Card(0, 40).Obj()
	fits := podtest.Make("ns", "fits").GPU("main", 10).Obj()
	tests := []struct {
		name    string
		pods    []*corev1.Pod
		args    *extenderv1.ExtenderBindingArgs
		wantErr string
		outcome string
	}{
		{
			name:    "pod no longer fits: nothing is written",
			pods:    []*corev1.Pod{podtest.Make("ns", "late").GPU("main", 20).Obj(), podtest.Make("ns", "resident").GPU("main", 30).AssignOn("n1", api.PhaseAllocated, 0).Obj()},
			args:    bindArgs(podtest.Make("ns", "late").Obj(), "n1"),
			wantErr: `bind ns/late: pod no longer fits on node n1: no single card has 20 GiB free for container "main"; largest free is 10 GiB on card 0`,
			outcome: outcomeNoFit,
		},
		{
			name:    "pod not found",
			args:    &extenderv1.ExtenderBindingArgs{PodName: "gone", PodNamespace: "ns", PodUID: "u", Node: "n1"},
			wantErr: `bind ns/gone: pods "gone" not found`,
			outcome: outcomeAPIError,
		},
		{
			name:    "pod recreated under the same name",
			pods:    []*corev1.Pod{fits},
			args:    &extenderv1.ExtenderBindingArgs{PodName: "fits", PodNamespace: "ns", PodUID: "old-uid", Node: "n1"},
			wantErr: "bind ns/fits: pod UID is uid-ns-fits, the request names old-uid (was the pod recreated?)",
			outcome: outcomeInvalid,
		},
		{
			name:    "pod already bound",
			pods:    []*corev1.Pod{podtest.Make("ns", "bound").GPU("main", 1).AssignOn("n1", api.PhaseAllocated, 0).Obj()},
			args:    bindArgs(podtest.Make("ns", "bound").Obj(), "n1"),
			wantErr: "bind ns/bound: pod is already bound to n1",
			outcome: outcomeInvalid,
		},
		{
			name:    "unknown node",
			pods:    []*corev1.Pod{fits},
			args:    bindArgs(fits, "ghost"),
			wantErr: "bind ns/fits: node unknown to the gpushare extender: ghost",
			outcome: outcomeInvalid,
		},
		{
			name:    "init container asks for gpu-mem",
			pods:    []*corev1.Pod{podtest.Make("ns", "init").InitGPU("i", 1).GPU("main", 1).Obj()},
			args:    bindArgs(podtest.Make("ns", "init").Obj(), "n1"),
			wantErr: `bind ns/init: init containers may not request example.com/gpu-mem: init container "i" asks for 1`,
			outcome: outcomeInvalid,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{}, []*corev1.Node{node}, tc.pods...)
			before := e.usedOn("n1")
			res, err := e.srv.Bind(context.Background(), tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.Error != tc.wantErr {
				t.Errorf("error result:\n got %s\nwant %s", res.Error, tc.wantErr)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("API writes %v, want none", w)
			}
			if diff := cmp.Diff(before, e.usedOn("n1")); diff != "" {
				t.Errorf("cache changed (-before +after):\n%s", diff)
			}
			if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(tc.outcome)); n != 1 {
				t.Errorf("%s counter = %v, want 1", tc.outcome, n)
			}
		})
	}
}

// Someone other than kube-scheduler calling /bind (kube-scheduler delegates
// only pods asking for gpu-mem) cannot bind an arbitrary pod: nothing is
// written, and the error says why.
func TestBindRefusesAPodAskingNoGPU(t *testing.T) {
	pod := podtest.Make("ns", "web").Container("c").Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("cpu").NoGPU().Obj()}, pod)
	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "cpu"))
	if err != nil || !strings.Contains(res.Error, "the pod asks for no example.com/gpu-mem; the gpushare extender binds only pods that do") {
		t.Fatalf("bind of a pod without gpu-mem: %v %q, want refused", err, res.Error)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
	if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcomeInvalid)); n != 1 {
		t.Errorf("invalid counter = %v, want 1", n)
	}
}

func TestRefusedBindingForgetsTheAssumptionAndLeavesNoRecord(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"API server error", apierrors.NewInternalError(errors.New("etcd is down")), "etcd is down"},
		{"no RBAC", apierrors.NewForbidden(podsGVR.GroupResource(), "p", errors.New("no RBAC")), "no RBAC"},
		{"pod recreated: UID precondition fails", apierrors.NewConflict(podsGVR.GroupResource(), "p", errors.New("precondition failed: UID")), "precondition failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
			e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj()}, pod)
			e.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "binding" {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			res, err := e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Error, tc.wantErr) {
				t.Errorf("error result %q does not say why (%q)", res.Error, tc.wantErr)
			}
			if _, ok := e.cache.PodState(pod.UID); ok {
				t.Error("assumption kept after a refused Binding")
			}
			if _, ok := e.apiPod(t, "p").Annotations[api.DefaultNames().AnnotationAssignment()]; ok {
				t.Error("assignment annotation on an unbound pod")
			}
			if diff := cmp.Diff([]string{"create pods/binding p"}, e.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcomeAPIError)); n != 1 {
				t.Errorf("api_error counter = %v, want 1", n)
			}
		})
	}
}

// A Binding that got no answer may have bound the pod: its units stay
// counted (never two pods on one card's units), and when kube-scheduler binds
// the pod again — so it was not bound — the retry replaces them instead of
// failing or counting them twice.
func TestBindWithUnknownOutcomeKeepsUnitsUntilTheRetry(t *testing.T) {
	pod := podtest.Make("ns", "p").GPU("main", 30).Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj()}, pod)
	var calls atomic.Int32
	e.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" && calls.Add(1) == 1 {
			return true, nil, fmt.Errorf("Post \"https://apiserver/api/v1/namespaces/ns/pods/p/binding\": %w", context.DeadlineExceeded)
		}
		return false, nil, nil
	})
	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "may or may not be bound") {
		t.Errorf("error result %q does not say the outcome is unknown", res.Error)
	}
	if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, e.usedOn("n1")); diff != "" {
		t.Errorf("after the unanswered Binding, cache used (-want +got):\n%s", diff)
	}
	res, err = e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
	if err != nil || res.Error != "" {
		t.Fatalf("retry: %v %q", err, res.Error)
	}
	if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, e.usedOn("n1")); diff != "" {
		t.Errorf("after the retry, cache used (-want +got):\n%s", diff)
	}
	if got := assignment(t, e.apiPod(t, "p")); got.Containers[0].Units != 30 {
		t.Errorf("record %+v", got)
	}
	for outcome, want := range map[string]float64{outcomeUnknown: 1, outcomeBound: 1} {
		if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcome)); n != want {
			t.Errorf("%s counter = %v, want %v", outcome, n, want)
		}
	}
}

// A bind whose write the API budget can only start after the bind timeout
// (less the write's allowance) fails at once, writes nothing and forgets its
// units; one that can start in time waits for its token and binds.
func TestBindFailsAtOnceWhenTheWriteBudgetCannotStartItInTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		bindTimeout time.Duration
		wantOutcome string
		wantErr     string
	}{
		{
			name:        "token in 1s, write must start within 0.5s: throttled at once",
			bindTimeout: 1500 * time.Millisecond,
			wantOutcome: outcomeThrottled,
			wantErr:     "bind ns/second: not bound: the extender's API write budget (1 writes/s, burst 1) could start this Binding only in 1s, too late to finish within the bind timeout (1.5s); kube-scheduler retries the pod. If this repeats, raise the extender's --kube-api-qps/--kube-api-burst",
		},
		{
			name:        "token in 1s, write may start within 3s: waits and binds",
			bindTimeout: 4 * time.Second,
			wantOutcome: outcomeBound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first := podtest.Make("ns", "first").GPU("main", 10).Obj()
			second := podtest.Make("ns", "second").GPU("main", 10).Obj()
			fc := testingclock.NewFakeClock(now)
			e := newEnv(t, envOpts{writes: rate.NewLimiter(1, 1), bindTimeout: tc.bindTimeout, clock: fc},
				[]*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj()}, first, second)
			if res, err := e.srv.Bind(context.Background(), bindArgs(first, "n1")); err != nil || res.Error != "" {
				t.Fatalf("first bind: %v %q", err, res.Error)
			}
			done := make(chan *extenderv1.ExtenderBindingResult, 1)
			go func() {
				res, err := e.srv.Bind(context.Background(), bindArgs(second, "n1"))
				if err != nil {
					res = &extenderv1.ExtenderBindingResult{Error: err.Error()}
				}
				done <- res
			}()
			var res *extenderv1.ExtenderBindingResult
			select {
			case res = <-done: // throttled: no wait at all
			case <-waitForTimerC(fc):
				fc.Step(time.Second)
				res = <-done
			}
			if res.Error != tc.wantErr {
				t.Errorf("error result:\n got %s\nwant %s", res.Error, tc.wantErr)
			}
			if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(tc.wantOutcome)); n != map[bool]float64{true: 2, false: 1}[tc.wantOutcome == outcomeBound] {
				t.Errorf("%s counter = %v", tc.wantOutcome, n)
			}
			_, assumed := e.cache.PodState(second.UID)
			bound := e.apiPod(t, "second").Spec.NodeName != ""
			if want := tc.wantOutcome == outcomeBound; assumed != want || bound != want {
				t.Errorf("second pod: assumed %v, bound %v; want both %v", assumed, bound, want)
			}
		})
	}
}

// A caller that goes away while its bind waits for the write budget leaves
// nothing behind: no write, no units, and the budget's token is returned.
func TestBindCancelledWhileWaitingWritesNothing(t *testing.T) {
	first := podtest.Make("ns", "first").GPU("main", 10).Obj()
	second := podtest.Make("ns", "second").GPU("main", 10).Obj()
	fc := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, envOpts{writes: rate.NewLimiter(1, 1), clock: fc}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj()}, first, second)
	if res, err := e.srv.Bind(context.Background(), bindArgs(first, "n1")); err != nil || res.Error != "" {
		t.Fatalf("first bind: %v %q", err, res.Error)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		res, _ := e.srv.Bind(ctx, bindArgs(second, "n1"))
		done <- res.Error
	}()
	waitForTimer(t, fc)
	cancel()
	if got := <-done; !strings.Contains(got, "the caller gave up while the Binding waited 1s") {
		t.Errorf("error result %q", got)
	}
	if _, ok := e.cache.PodState(second.UID); ok {
		t.Error("a cancelled bind left its units assumed")
	}
	if diff := cmp.Diff([]string{"create pods/binding first"}, e.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcomeCancelled)); n != 1 {
		t.Errorf("cancelled counter = %v, want 1", n)
	}
}

// barrierCache makes the first n NodeSnapshot calls wait for each other, so
// that n concurrent binds all decide on the same snapshot: the worst case
// for the assume protocol.
type barrierCache struct {
	*cache.Cache
	n       int32
	calls   atomic.Int32
	release chan struct{}
}

func (b *barrierCache) NodeSnapshot(name string) (*allocator.Node, error) {
	snap, err := b.Cache.NodeSnapshot(name)
	switch i := b.calls.Add(1); {
	case i == b.n:
		close(b.release)
	case i < b.n:
		<-b.release
	}
	return snap, err
}

// TestConcurrentBindsNeverExceedCapacity fires many binds at one node at
// once, all deciding on the same snapshot first: every card must end with
// assigned units ≤ capacity, in the cache and in the annotations written to
// the API, and exactly as many pods as fit must be bound.
func TestConcurrentBindsNeverExceedCapacity(t *testing.T) {
	const pods = 64
	// Cards of 40, 24 and 16 GiB: 80 GiB in all; pods of 6 GiB fit 6+4+2 = 12.
	node := fixture.MakeNode("n1").Card(0, 40).Card(1, 24).Card(2, 16).Obj()
	var all []*corev1.Pod
	for i := 0; i < pods; i++ {
		all = append(all, podtest.Make("ns", fmt.Sprintf("p%02d", i)).GPU("main", 6).Obj())
	}
	wrap := func(c *cache.Cache) Cache { return &barrierCache{Cache: c, n: pods, release: make(chan struct{})} }
	e := newEnv(t, envOpts{wrap: wrap}, []*corev1.Node{node}, all...)

	var wg sync.WaitGroup
	results := make([]string, pods)
	start := make(chan struct{})
	for i, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.srv.Bind(context.Background(), bindArgs(p, "n1"))
			if err != nil {
				results[i] = err.Error()
				return
			}
			results[i] = res.Error
		}()
	}
	close(start)
	wg.Wait()

	bound := 0
	for i, r := range results {
		switch {
		case r == "":
			bound++
		case !strings.Contains(r, "no longer fits"):
			t.Errorf("pod %d: unexpected error %q", i, r)
		}
	}
	if bound != 12 {
		t.Errorf("%d pods bound, want 12 (6+4+2 pods of 6 GiB)", bound)
	}
	// Cache view.
	for _, c := range e.cache.Inspect("n1")[0].Cards {
		if c.Used > c.Capacity {
			t.Errorf("cache: card %d has %d of %d units", c.Index, c.Used, c.Capacity)
		}
	}
	// API view: sum the written assignments per card.
	perCard := map[string]int64{}
	for _, p := range all {
		got := e.apiPod(t, p.Name)
		if got.Spec.NodeName == "" {
			if _, ok := got.Annotations[api.DefaultNames().AnnotationAssignment()]; ok {
				t.Errorf("unbound pod %s carries an assignment", p.Name)
			}
			continue
		}
		for _, ca := range assignment(t, got).Containers {
			perCard[ca.CardUUID] += ca.Units
		}
	}
	capacity := map[string]int64{podtest.CardUUID("n1", 0): 40, podtest.CardUUID("n1", 1): 24, podtest.CardUUID("n1", 2): 16}
	for uuid, u := range perCard {
		if u > capacity[uuid] {
			t.Errorf("API: card %s has %d units assigned, capacity %d", uuid, u, capacity[uuid])
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.binds) != bound {
		t.Errorf("%d Bindings posted, %d binds succeeded", len(e.binds), bound)
	}
}

// TestEveryPolicyFiltersAndBindsWithinCapacity runs every registered policy
// through filter (best mode) and bind, one pod after another, on nodes with
// cards of different sizes, CPU and memory: the chosen node must be one the
// filter kept, and no card may ever exceed its capacity.
func TestEveryPolicyFiltersAndBindsWithinCapacity(t *testing.T) {
	for _, policy := range registry.Names() {
		t.Run(policy, func(t *testing.T) {
			nodes := []*corev1.Node{
				fixture.MakeNode("a").Card(0, 16).Card(1, 24).Allocatable("8", "32Gi").Obj(),
				fixture.MakeNode("b").Card(0, 40).Allocatable("32", "128Gi").Obj(),
				fixture.MakeNode("c").Cards(4, 12).Allocatable("16", "64Gi").Obj(),
			}
			var pods []*corev1.Pod
			for i, u := range []int64{8, 12, 4, 16, 6, 10, 3, 12, 9, 5, 7, 2, 11, 4} {
				pods = append(pods, podtest.Make("ns", fmt.Sprintf("p%02d", i)).GPU("main", u).Host("1", "2Gi").Obj())
			}
			e := newEnv(t, envOpts{policy: policy}, nodes, pods...)
			names := []string{"a", "b", "c"}
			for _, p := range pods {
				e.cache.SetPod(p) // the informer sees the pod before it is scheduled
				fr, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
				if err != nil {
					t.Fatal(err)
				}
				if len(*fr.NodeNames) == 0 {
					continue // nothing fits any more
				}
				res, err := e.srv.Bind(context.Background(), bindArgs(p, (*fr.NodeNames)[0]))
				if err != nil || res.Error != "" {
					t.Fatalf("%s: bind: %v %q", p.Name, err, res.Error)
				}
			}
			bound := 0
			for _, ni := range e.cache.Inspect() {
				for _, c := range ni.Cards {
					if c.Used > c.Capacity {
						t.Errorf("node %s card %d: %d of %d units", ni.Name, c.Index, c.Used, c.Capacity)
					}
					bound += len(c.Pods)
				}
			}
			if bound == 0 {
				t.Error("no pod was bound")
			}
		})
	}
}

// waitForTimerC is closed once something waits on fc's timers.
func waitForTimerC(fc *testingclock.FakeClock) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return fc.HasWaiters(), nil
		})
		close(ch)
	}()
	return ch
}

// waitForTimer returns once something waits on fc's timers.
func waitForTimer(t *testing.T, fc *testingclock.FakeClock) {
	t.Helper()
	<-waitForTimerC(fc)
	if !fc.HasWaiters() {
		t.Fatal("nothing waited on the clock within 30s")
	}
}

// With a record key the extender signs every record it writes, so a device
// plugin holding the same key can tell it from a forged one.
func TestBindSignsTheRecordWithTheRecordKey(t *testing.T) {
	keys := podtest.RecordKeys(strings.Repeat("s", 32))
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	e := newEnv(t, envOpts{keys: keys}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj()}, pod)
	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
	if err != nil || res.Error != "" {
		t.Fatalf("bind: %v %q", err, res.Error)
	}
	a := assignment(t, e.apiPod(t, "p"))
	if a.Signature == "" {
		t.Fatal("the record is not signed")
	}
	if err := keys.Verify(a); err != nil {
		t.Errorf("the record does not verify with the extender's key: %v", err)
	}
	if err := podtest.RecordKeys(strings.Repeat("x", 32)).Verify(a); !errors.Is(err, api.ErrBadSignature) {
		t.Errorf("verified with another key: %v, want ErrBadSignature", err)
	}
}
