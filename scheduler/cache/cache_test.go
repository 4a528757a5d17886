package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// used returns node's per-card used units by card index.
func used(c *cache.Cache, node string) map[int]int64 {
	infos := c.Inspect(node)
	if len(infos) == 0 {
		return nil
	}
	out := map[int]int64{}
	for _, card := range infos[0].Cards {
		out[card.Index] = card.Used
	}
	return out
}

// startInformers runs a cache on informers over client until the test ends.
func startInformers(t *testing.T, client kubernetes.Interface, opts ...cache.Option) *cache.Cache {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := cache.New(opts...)
	factory := informers.NewSharedInformerFactory(client, 0)
	if _, err := c.Attach(factory); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if c.Synced() {
		t.Fatal("cache synced before WaitForSync")
	}
	if err := c.WaitForSync(ctx, factory); err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRebuildFromAssignmentsOnStart(t *testing.T) {
	other := podtest.Make("ns", "copied").GPU("main", 5).Obj()
	copied := podtest.AssignmentFor(other, "n1", api.PhaseAssigned, 1)
	copied.PodUID = "uid-of-another-pod"

	objs := []runtime.Object{
		fixture.MakeNode("n1").Card(0, 40).Card(1, 80).Obj(),
		fixture.MakeNode("n2").Card(0, 24).Obj(),
		// Counted: bound, valid assignment, running or pending.
		podtest.Make("ns", "a").GPU("main", 10).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
		podtest.Make("ns", "b").GPU("x", 20).GPU("y", 30).AssignOn("n1", api.PhaseAssigned, 1, 1).Obj(),
		podtest.Make("ns", "c").GPU("main", 24).AssignOn("n2", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
		// Not counted: finished.
		podtest.Make("ns", "done").GPU("main", 7).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodSucceeded).Obj(),
		podtest.Make("ns", "failed").GPU("main", 7).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodFailed).Obj(),
		// Not counted: an assignment copied from another pod (wrong UID).
		podtest.Make("ns", "copied").GPU("main", 5).Node("n1").Annotation(api.DefaultNames().AnnotationAssignment(), podtest.MustEncode(copied)).Obj(),
		// Not counted: an annotation but not bound.
		podtest.Make("ns", "unbound").GPU("main", 5).Annotation(api.DefaultNames().AnnotationAssignment(),
			podtest.MustEncode(podtest.AssignmentFor(podtest.Make("ns", "unbound").GPU("main", 5).Obj(), "n1", api.PhaseAssigned, 0))).Obj(),
		// Not counted: bound to another node than its assignment names.
		podtest.Make("ns", "elsewhere").GPU("main", 5).AssignOn("n1", api.PhaseAssigned, 0).Node("n2").Obj(),
	}
	c := startInformers(t, fake.NewClientset(objs...))

	want := map[string]map[int]int64{"n1": {0: 10, 1: 50}, "n2": {0: 24}}
	got := map[string]map[int]int64{"n1": used(c, "n1"), "n2": used(c, "n2")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("used units after start (-want +got):\n%s", diff)
	}
	if st, ok := c.PodState("uid-ns-a"); !ok || st != cache.Confirmed {
		t.Errorf("pod a: state %q, %v; want confirmed", st, ok)
	}
}

func TestReleaseOnDeleteAndCompletion(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		fixture.MakeNode("n1").Card(0, 40).Obj(),
		podtest.Make("ns", "deleted").GPU("main", 10).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
		podtest.Make("ns", "completes").GPU("main", 20).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
		podtest.Make("ns", "terminating").GPU("main", 5).AssignOn("n1", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
	)
	c := startInformers(t, client)
	if got := used(c, "n1")[0]; got != 35 {
		t.Fatalf("used before = %d, want 35", got)
	}

	if err := client.CoreV1().Pods("ns").Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted pod released", func() bool { return used(c, "n1")[0] == 25 })

	p, err := client.CoreV1().Pods("ns").Get(ctx, "completes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "completed pod released", func() bool { return used(c, "n1")[0] == 5 })

	// A terminating pod's containers may still hold the memory: it counts
	// until it is gone.
	p, err = client.CoreV1().Pods("ns").Get(ctx, "terminating", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if _, err := client.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer delivers events in order: once a pod created after the
	// update is counted, the update has been handled.
	if _, err := client.CoreV1().Pods("ns").Create(ctx, podtest.Make("ns", "marker").GPU("main", 1).AssignOn("n1", api.PhaseAssigned, 0).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "marker pod counted", func() bool { _, ok := c.PodState("uid-ns-marker"); return ok })
	if got := used(c, "n1")[0]; got != 6 {
		t.Errorf("used with a terminating pod and the marker = %d, want 6 (5 + 1)", got)
	}
}

// decideAndAssume places pod on node with binpack and assumes it, as bind does.
func decideAndAssume(t *testing.T, c *cache.Cache, pod *corev1.Pod, node string) (api.Assignment, error) {
	t.Helper()
	snap, err := c.NodeSnapshot(node)
	if err != nil {
		return api.Assignment{}, err
	}
	pol, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	preq, err := api.DefaultNames().RequestFromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	d := pol.Decide(snap, allocator.NewRequest(preq), c.Workload())
	if !d.Fits {
		return api.Assignment{}, fmt.Errorf("does not fit: %s", d.Message())
	}
	var idx []int
	for _, p := range d.Placements {
		idx = append(idx, p.Grants[0].Card)
	}
	a := podtest.AssignmentFor(pod, node, api.PhaseAssigned, idx...)
	return a, c.Assume(pod, preq, a, snap)
}

func TestAssumeForgetConfirm(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pod := podtest.Make("ns", "p").GPU("main", 30).Obj()
	client := fake.NewClientset(fixture.MakeNode("n1").Card(0, 40).Card(1, 80).Obj(), pod)
	c := startInformers(t, client, cache.WithClock(clk), cache.WithAssumeTTL(time.Minute))

	// Assume counts at once, before any API write.
	a, err := decideAndAssume(t, c, pod, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after assume (-want +got):\n%s", diff)
	}
	// A second assumption for the same pod is refused.
	if _, err := decideAndAssume(t, c, pod, "n1"); !errors.Is(err, cache.ErrAlreadyAssumed) {
		t.Errorf("second assume: err = %v, want ErrAlreadyAssumed", err)
	}
	// Forget releases.
	c.Forget(pod.UID)
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after forget (-want +got):\n%s", diff)
	}

	// Assume again, then the API writes land and the informer confirms.
	if a, err = decideAndAssume(t, c, pod, "n1"); err != nil {
		t.Fatal(err)
	}
	c.FinishBinding(pod.UID)
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "n1"
	bound.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): podtest.MustEncode(a)}
	if _, err := client.CoreV1().Pods("ns").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "confirmation", func() bool { st, _ := c.PodState(pod.UID); return st == cache.Confirmed })
	// Forget after confirmation changes nothing; nor does the TTL.
	c.Forget(pod.UID)
	clk.Step(time.Hour)
	if n := c.CleanupExpired(); n != 0 {
		t.Errorf("CleanupExpired dropped %d confirmed pods", n)
	}
	if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after confirm (-want +got):\n%s", diff)
	}
}

func TestAssumedPodExpiresOnlyAfterBindFinishedAndTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := cache.New(cache.WithClock(clk), cache.WithAssumeTTL(time.Minute))
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	inFlight := podtest.Make("ns", "in-flight").GPU("main", 10).Obj()
	finished := podtest.Make("ns", "finished").GPU("main", 10).Obj()
	for _, p := range []*corev1.Pod{inFlight, finished} {
		if _, err := decideAndAssume(t, c, p, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	c.FinishBinding(finished.UID)
	clk.Step(59 * time.Second)
	if n := c.CleanupExpired(); n != 0 {
		t.Fatalf("dropped %d before the TTL", n)
	}
	clk.Step(2 * time.Second)
	if n := c.CleanupExpired(); n != 1 {
		t.Fatalf("dropped %d after the TTL, want 1", n)
	}
	if _, ok := c.PodState(finished.UID); ok {
		t.Error("finished, unconfirmed pod still cached after its TTL")
	}
	if st, ok := c.PodState(inFlight.UID); !ok || st != cache.Assumed {
		t.Error("a pod whose bind is in flight must never expire")
	}
}

func TestAssumeOnStaleSnapshotIsRefused(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	first := podtest.Make("ns", "first").GPU("main", 30).Obj()
	second := podtest.Make("ns", "second").GPU("main", 30).Obj()
	snap, err := c.NodeSnapshot("n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decideAndAssume(t, c, first, "n1"); err != nil {
		t.Fatal(err)
	}
	// second was decided on the snapshot from before first's assumption.
	a := podtest.AssignmentFor(second, "n1", api.PhaseAssigned, 0)
	if err := c.Assume(second, podtest.Request(second), a, snap); !errors.Is(err, cache.ErrStale) {
		t.Fatalf("assume on a stale snapshot: err = %v, want ErrStale", err)
	}
	// Decided again on the fresh snapshot, it does not fit.
	if _, err := decideAndAssume(t, c, second, "n1"); err == nil {
		t.Fatal("second pod fits on a card that has 10 of 40 left")
	}
	if got := used(c, "n1")[0]; got != 30 {
		t.Errorf("used = %d, want 30", got)
	}
}

func TestAssumeNeverExceedsCapacity(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).CardOf(1, 80, "A100", api.CardUnhealthy).Obj())
	pod := podtest.Make("ns", "p").GPU("main", 50).Obj()
	snap, _ := c.NodeSnapshot("n1")
	for name, a := range map[string]api.Assignment{
		"more than the card holds": podtest.AssignmentFor(pod, "n1", api.PhaseAssigned, 0),
		"an unhealthy card":        podtest.AssignmentFor(pod, "n1", api.PhaseAssigned, 1),
		"a card not in inventory":  podtest.AssignmentFor(pod, "n1", api.PhaseAssigned, 7),
	} {
		if err := c.Assume(pod, podtest.Request(pod), a, snap); !errors.Is(err, cache.ErrOverCapacity) {
			t.Errorf("%s: err = %v, want ErrOverCapacity", name, err)
		}
	}
	if err := c.Assume(pod, podtest.Request(pod), podtest.AssignmentFor(pod, "n2", api.PhaseAssigned, 0), snap); !errors.Is(err, cache.ErrUnknownNode) {
		t.Errorf("unknown node: err = %v, want ErrUnknownNode", err)
	}
}

func TestDevicePluginRewriteMovesUsage(t *testing.T) {
	ctx := context.Background()
	pod := podtest.Make("ns", "p").GPU("main", 10).AssignOn("n1", api.PhaseAssigned, 0).Obj()
	client := fake.NewClientset(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj(), pod)
	c := startInformers(t, client)
	if diff := cmp.Diff(map[int]int64{0: 10, 1: 0}, used(c, "n1")); diff != "" {
		t.Fatalf("before (-want +got):\n%s", diff)
	}
	// The kubelet handed the container card 1: the device plugin corrects
	// the record and marks it Allocated.
	rewritten := pod.DeepCopy()
	rewritten.Annotations[api.DefaultNames().AnnotationAssignment()] = podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 1))
	if _, err := client.CoreV1().Pods("ns").Update(ctx, rewritten, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "usage moved to card 1", func() bool {
		u := used(c, "n1")
		return u[0] == 0 && u[1] == 10
	})
	info := c.Inspect("n1")[0]
	want := []api.ExtenderPod{{Namespace: "ns", Name: "p", UID: pod.UID, Container: "main", Units: 10, State: cache.Confirmed, Phase: api.PhaseAllocated}}
	if diff := cmp.Diff(want, info.Cards[1].Pods); diff != "" {
		t.Errorf("card 1 pods (-want +got):\n%s", diff)
	}
}

func TestNodeInventoryStates(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("no-inventory").NoInventory().Obj())
	c.SetNode(fixture.MakeNode("broken").RawInventory(`{"version":1,`).Obj())
	c.SetNode(fixture.MakeNode("cpu-only").NoGPU().Allocatable("8", "32Gi").Obj())
	c.SetNode(fixture.MakeNode("isolated").Card(0, 40).Card(1, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "1").Obj())
	c.SetNode(fixture.MakeNode("bad-isolation").Card(0, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "card-one").Obj())

	snaps := c.Snapshot([]string{"no-inventory", "broken", "cpu-only", "isolated", "bad-isolation", "unknown"})
	if err := snaps[0].InventoryErr; !errors.Is(err, api.ErrNoInventory) {
		t.Errorf("node with gpu-mem capacity but no inventory: InventoryErr = %v, want ErrNoInventory", err)
	}
	if err := snaps[1].InventoryErr; !errors.Is(err, api.ErrInvalidInventory) {
		t.Errorf("node with a broken inventory: InventoryErr = %v, want ErrInvalidInventory", err)
	}
	if snaps[2].InventoryErr != nil || len(snaps[2].Cards) != 0 {
		t.Errorf("node without GPUs: %+v, want no error and no cards", snaps[2])
	}
	if got := []api.CardState{snaps[3].Cards[0].State, snaps[3].Cards[1].State}; !cmp.Equal(got, []api.CardState{api.CardHealthy, api.CardIsolated}) {
		t.Errorf("isolation annotation: card states %v, want [healthy isolated]", got)
	}
	if snaps[4].InventoryErr == nil {
		t.Error("an unparsable isolation annotation must make the node unusable, not silently ignored")
	}
	if snaps[5] != nil {
		t.Error("unknown node has a snapshot")
	}

	// A deleted node disappears.
	c.DeleteNode("isolated")
	if s := c.Snapshot([]string{"isolated"}); s[0] != nil {
		t.Error("deleted node still has a snapshot")
	}
}

// TestInspectClassifiesUnusableInventories checks the code /inspect sends
// with a node's inventory error, which the inspector turns into its warning.
func TestInspectClassifiesUnusableInventories(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("no-inventory").NoInventory().Obj())
	c.SetNode(fixture.MakeNode("broken").RawInventory(`{"version":1,`).Obj())
	c.SetNode(fixture.MakeNode("bad-isolation").Card(0, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "card-one").Obj())
	c.SetNode(fixture.MakeNode("fine").Card(0, 40).Obj())
	got := map[string]api.InventoryErrorCode{}
	for _, n := range c.Inspect() {
		if (n.InventoryError == "") != (n.InventoryErrorCode == "") {
			t.Errorf("node %s: error %q with code %q: want both or neither", n.Name, n.InventoryError, n.InventoryErrorCode)
		}
		got[n.Name] = n.InventoryErrorCode
	}
	want := map[string]api.InventoryErrorCode{
		"no-inventory":  api.InventoryErrorMissing,
		"broken":        api.InventoryErrorInvalid,
		"bad-isolation": api.InventoryErrorIsolation,
		"fine":          "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inventory error codes (-want +got):\n%s", diff)
	}
	// Fixed, the node has no error and no code.
	c.SetNode(fixture.MakeNode("bad-isolation").Card(0, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "0").Obj())
	if n := c.Inspect("bad-isolation")[0]; n.InventoryError != "" || n.InventoryErrorCode != "" {
		t.Errorf("after the fix: error %q, code %q; want neither", n.InventoryError, n.InventoryErrorCode)
	}
}

// TestInspectSaysWhyACardTakesNoPods checks that /inspect carries a card's
// reason: the device plugin's for an unhealthy card, Isolation.Apply's for a
// card the operator's annotation isolates.
func TestInspectSaysWhyACardTakesNoPods(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).CardOf(1, 40, "A100", api.CardUnhealthy).Reason("XID 79").Card(2, 40).
		Annotation(api.DefaultNames().AnnotationIsolation(), "2").Obj())
	got := map[int][2]string{}
	for _, card := range c.Inspect("n1")[0].Cards {
		got[card.Index] = [2]string{string(card.State), card.Reason}
	}
	want := map[int][2]string{
		0: {string(api.CardHealthy), ""},
		1: {string(api.CardUnhealthy), "XID 79"},
		2: {string(api.CardIsolated), api.ReasonIsolatedByAnnotation},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("card states and reasons (-want +got):\n%s", diff)
	}
}

func TestWorkloadLearnsDemandShapesOncePerPod(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj())
	c.SetNode(fixture.MakeNode("n2").CardOf(0, 80, "H100", api.CardHealthy).Obj())
	p1 := podtest.Make("ns", "p1").GPU("a", 10).GPU("b", 20).Host("4", "8Gi").Obj()
	p2 := podtest.Make("ns", "p2").GPU("a", 10).Host("2", "4Gi").Obj()
	c.SetPod(p1)
	c.SetPod(p1) // an update: not counted twice
	c.SetPod(p2)
	c.SetPod(podtest.Make("ns", "cpu").Container("main").Host("1", "1Gi").Obj())
	c.SetPod(podtest.Make("ns", "invalid").InitGPU("i", 1).Obj()) // not learned
	w := c.Workload()
	want := []allocator.Shape{
		{Units: 0, Host: allocator.HostResources{CPUMilli: 1000, MemoryMiB: 1024}, Weight: 1},
		// p1's two containers share its 4 CPU / 8 GiB.
		{Units: 10, Host: allocator.HostResources{CPUMilli: 2000, MemoryMiB: 4096}, Weight: 2},
		{Units: 20, Host: allocator.HostResources{CPUMilli: 2000, MemoryMiB: 4096}, Weight: 1},
	}
	if diff := cmp.Diff(want, w.Shapes); diff != "" {
		t.Errorf("workload shapes (-want +got):\n%s", diff)
	}
	wantCap := map[string]allocator.ModelCapacity{"A100": {Cards: 2, Units: 80}, "H100": {Cards: 1, Units: 80}}
	if diff := cmp.Diff(wantCap, w.ModelCapacity); diff != "" {
		t.Errorf("model capacity (-want +got):\n%s", diff)
	}
	if c.Workload() != w {
		t.Error("an unchanged workload was rebuilt")
	}
	// Updates that change no shape and no model's capacity (a node's
	// annotations, a pod bound) keep the same value: the extender's memo is
	// keyed by it.
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Annotation("example.com/touched", "yes").Obj())
	c.SetPod(podtest.Make("ns", "p2").GPU("a", 10).Host("2", "4Gi").AssignOn("n1", api.PhaseAllocated, 0).Obj())
	if c.Workload() != w {
		t.Error("a node update and a bind that change nothing the workload counts gave a new workload value")
	}
	c.SetPod(podtest.Make("ns", "p3").GPU("a", 10).Host("2", "4Gi").Obj())
	if w3 := c.Workload(); w3 == w || w3.Shapes[1].Weight != 3 {
		t.Errorf("a new pod did not give a new workload with its shape counted: %+v", w3.Shapes)
	}
	w = c.Workload()
	c.DeleteNode("n2")
	if diff := cmp.Diff(map[string]allocator.ModelCapacity{"A100": {Cards: 2, Units: 80}}, c.Workload().ModelCapacity); diff != "" {
		t.Errorf("model capacity after a node is deleted (-want +got):\n%s", diff)
	}
}

func TestHostFreeCountsEveryBoundPod(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Allocatable("16", "64Gi").Obj())
	c.SetNode(fixture.MakeNode("no-alloc").Card(0, 40).Obj())
	host := func() *allocator.HostResources { return c.Snapshot([]string{"n1"})[0].HostFree }
	if diff := cmp.Diff(&allocator.HostResources{CPUMilli: 16000, MemoryMiB: 65536}, host()); diff != "" {
		t.Errorf("empty node (-want +got):\n%s", diff)
	}
	gpu := podtest.Make("ns", "gpu").GPU("main", 10).Host("4", "16Gi").AssignOn("n1", api.PhaseAllocated, 0).Obj()
	web := podtest.Make("ns", "web").Container("main").Host("2", "1Gi").Node("n1").Obj()
	pending := podtest.Make("ns", "pending").Container("main").Host("8", "8Gi").Obj()
	done := podtest.Make("ns", "done").Container("main").Host("8", "8Gi").Node("n1").Phase(corev1.PodSucceeded).Obj()
	for _, p := range []*corev1.Pod{gpu, web, pending, done} {
		c.SetPod(p)
	}
	if diff := cmp.Diff(&allocator.HostResources{CPUMilli: 10000, MemoryMiB: 65536 - 16384 - 1024}, host()); diff != "" {
		t.Errorf("after pods (-want +got):\n%s", diff)
	}
	c.DeletePod(web.UID)
	if got := host().CPUMilli; got != 12000 {
		t.Errorf("CPU free after deleting web = %d, want 12000", got)
	}
	if got := c.Snapshot([]string{"no-alloc"})[0].HostFree; got != nil {
		t.Errorf("a node without allocatable CPU has HostFree %+v, want nil (unknown)", got)
	}
	// The web pod never requested GPU: it is not on any card.
	if diff := cmp.Diff(map[int]int64{0: 10}, used(c, "n1")); diff != "" {
		t.Errorf("card usage (-want +got):\n%s", diff)
	}
}

func TestStatusUpdateKeepsSnapshot(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	pod := podtest.Make("ns", "p").GPU("main", 10).AssignOn("n1", api.PhaseAllocated, 0).Obj()
	c.SetPod(pod)
	before, _ := c.NodeSnapshot("n1")
	pod.Status.Phase = corev1.PodRunning
	c.SetPod(pod)
	after, _ := c.NodeSnapshot("n1")
	if before != after {
		t.Error("a status update that changes no units replaced the node's snapshot (binds on it would retry needlessly)")
	}
}

// A pod that holds units and loses its valid record — removed, garbled, no
// longer matching the pod or, with record keys, its signature — keeps
// counting the last valid record the cache saw (state Remembered): the
// kubelet still holds the units, and the next pod must not land on them.
// The device plugin's repair confirms the pod again (here on the card the
// kubelet really gave it), and a finished pod frees its units.
func TestLostRecordKeepsCountingTheUnitsTheKubeletHolds(t *testing.T) {
	keys := podtest.RecordKeys("0123456789abcdef0123456789abcdef")
	pod := podtest.Make("ns", "p").GPU("main", 30).Node("n1").Phase(corev1.PodRunning).Obj()
	signed := func(cards ...int) string {
		a, err := keys.Sign(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, cards...))
		if err != nil {
			t.Fatal(err)
		}
		return podtest.MustEncode(a)
	}
	tests := []struct {
		name string
		keys api.RecordKeyring
		// valid is the record the cache sees first; lost, the one after.
		valid, lost string
	}{
		{"record removed", nil, podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 0)), ""},
		{"record garbled", nil, podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 0)), `{"version":1,`},
		{"record of another pod", nil, podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 0)),
			podtest.MustEncode(func() api.Assignment {
				a := podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 1)
				a.PodUID = "someone-else"
				return a
			}())},
		{"with keys: record replaced by an unsigned one on another card", keys, signed(0), podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 1))},
		{"with keys: record removed", keys, signed(0), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cache.New(cache.WithRecordKeys(tt.keys))
			c.SetNode(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj())
			set := func(record string, phase corev1.PodPhase) {
				p := pod.DeepCopy()
				p.Status.Phase = phase
				p.Annotations = map[string]string{}
				if record != "" {
					p.Annotations[api.DefaultNames().AnnotationAssignment()] = record
				}
				c.SetPod(p)
			}
			set(tt.valid, corev1.PodRunning)
			if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, used(c, "n1")); diff != "" {
				t.Fatalf("with the valid record (-want +got):\n%s", diff)
			}
			set(tt.lost, corev1.PodRunning)
			if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, used(c, "n1")); diff != "" {
				t.Errorf("after the record was lost the cache forgot units the kubelet holds (-want +got):\n%s", diff)
			}
			if st, ok := c.PodState(pod.UID); !ok || st != cache.Remembered {
				t.Errorf("state %q, want %q", st, cache.Remembered)
			}
			if _, err := decideAndAssume(t, c, podtest.Make("ns", "next").GPU("main", 20).Obj(), "n1"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[int]int64{0: 30, 1: 20}, used(c, "n1")); diff != "" {
				t.Errorf("the next pod was put on the full card (-want +got):\n%s", diff)
			}
			// The device plugin rewrites the record from the kubelet's
			// account: card 1.
			repaired := podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 1))
			if tt.keys != nil {
				repaired = signed(1)
			}
			set(repaired, corev1.PodRunning)
			if diff := cmp.Diff(map[int]int64{0: 0, 1: 50}, used(c, "n1")); diff != "" {
				t.Errorf("after the repair (-want +got):\n%s", diff)
			}
			if st, _ := c.PodState(pod.UID); st != cache.Confirmed {
				t.Errorf("after the repair: state %q, want %q", st, cache.Confirmed)
			}
			set(tt.lost, corev1.PodSucceeded)
			if diff := cmp.Diff(map[int]int64{0: 0, 1: 20}, used(c, "n1")); diff != "" {
				t.Errorf("a finished pod still counts (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("an extender started after the loss counts nothing until the repair", func(t *testing.T) {
		c := cache.New()
		c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
		p := pod.DeepCopy()
		c.SetPod(p)
		if diff := cmp.Diff(map[int]int64{0: 0}, used(c, "n1")); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		p.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 0))}
		c.SetPod(p)
		if diff := cmp.Diff(map[int]int64{0: 30}, used(c, "n1")); diff != "" {
			t.Errorf("after the repair (-want +got):\n%s", diff)
		}
	})

	t.Run("with keys, a record the keys do not verify is never counted", func(t *testing.T) {
		c := cache.New(cache.WithRecordKeys(keys))
		c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
		p := pod.DeepCopy()
		p.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): podtest.MustEncode(podtest.AssignmentFor(pod, "n1", api.PhaseAllocated, 0))}
		c.SetPod(p)
		if diff := cmp.Diff(map[int]int64{0: 0}, used(c, "n1")); diff != "" {
			t.Errorf("an unsigned record counted (-want +got):\n%s", diff)
		}
	})
}

// Node IDs (allocator.Node.ID): unique among the nodes the cache holds,
// kept across updates, given to a new node once their node is gone (and
// not while a pod still refers to the name), dense from 0.
func TestNodeIDsAreUniqueKeptAndReused(t *testing.T) {
	c := cache.New()
	id := func(name string) int32 {
		t.Helper()
		n, err := c.NodeSnapshot(name)
		if err != nil {
			t.Fatal(err)
		}
		return n.ID
	}
	for i := 0; i < 4; i++ {
		c.SetNode(fixture.MakeNode(fmt.Sprintf("n%d", i)).Card(0, 40).Obj())
	}
	seen := map[int32]string{}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("n%d", i)
		got := id(name)
		if other, dup := seen[got]; dup || got < 0 || got > 3 {
			t.Fatalf("%s has ID %d (also %q): want unique IDs 0 to 3", name, got, other)
		}
		seen[got] = name
	}
	before := id("n1")
	c.SetNode(fixture.MakeNode("n1").Cards(2, 40).Obj())
	pod := podtest.Make("ns", "p").GPU("main", 10).AssignOn("n2", api.PhaseAllocated, 0).Obj()
	c.SetPod(pod)
	if id("n1") != before {
		t.Errorf("an update changed n1's ID from %d to %d", before, id("n1"))
	}
	goneID, heldID := id("n1"), id("n2")
	c.DeleteNode("n1")
	c.DeleteNode("n2") // its pod still counts there: the entry and its ID stay
	c.SetNode(fixture.MakeNode("new").Card(0, 40).Obj())
	if got := id("new"); got != goneID {
		t.Errorf("the new node has ID %d, want the gone n1's %d", got, goneID)
	}
	c.SetNode(fixture.MakeNode("n2").Card(0, 40).Obj())
	if got := id("n2"); got != heldID {
		t.Errorf("n2, back while its pod held the entry, has ID %d, want its own %d", got, heldID)
	}
	c.SetNode(fixture.MakeNode("fresh").Card(0, 40).Obj())
	if got := id("fresh"); got != 4 {
		t.Errorf("with no ID free the next node has ID %d, want 4", got)
	}
}

// SnapshotsOf gives what SnapshotInto gives for the same names, and a known
// node's name is the snapshot's own string.
func TestSnapshotsOfResolvesNamesGivenAsBytes(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("a").Card(0, 40).Obj())
	c.SetNode(fixture.MakeNode("b").Card(0, 40).Obj())
	body := []byte(`"b","ghost","a"`)
	spans := [][2]int{{1, 2}, {5, 10}, {13, 14}}
	got, names, ids := make([]*allocator.Node, 3), make([]string, 3), make([]int32, 3)
	c.SnapshotsOf(got, names, ids, func(i int) []byte { return body[spans[i][0]:spans[i][1]] })
	want := c.SnapshotInto(nil, []string{"b", "ghost", "a"})
	if got[0] != want[0] || got[1] != nil || got[2] != want[2] || got[0] == nil || got[2] == nil {
		t.Fatalf("SnapshotsOf = %v, want %v", got, want)
	}
	if names[0] != "b" || names[1] != "" || names[2] != "a" {
		t.Errorf("names %q, want b, none, a", names)
	}
	for _, i := range []int{0, 2} {
		if unsafe.StringData(names[i]) != unsafe.StringData(got[i].Name) {
			t.Errorf("name %q is not the snapshot's own string", names[i])
		}
		if ids[i] != got[i].ID {
			t.Errorf("%s: ID %d, the snapshot's is %d", names[i], ids[i], got[i].ID)
		}
	}
}

// The workload handed out lags the pods seen by at most
// allocator.WorkloadTolerance of each shape's share: a burst of pods of a
// known shape keeps the value (the extender's memo holds) until the share
// has moved by more than that; a new shape gives a new value at once.
func TestWorkloadLagsWithinTheTolerance(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 80).Obj())
	seq := 0
	add := func(units int64, n int) {
		for i := 0; i < n; i++ {
			seq++
			c.SetPod(podtest.Make("ns", fmt.Sprintf("p%d", seq)).GPU("main", units).Obj())
		}
	}
	add(10, 500)
	add(20, 500)
	w := c.Workload()
	share := func(w *allocator.Workload, units int64) float64 {
		var total, mine float64
		for _, s := range w.Shapes {
			total += s.Weight
			if s.Units == units {
				mine += s.Weight
			}
		}
		return mine / total
	}
	// One more 10-unit pod moves its share by 0.0005: far within 0.01.
	changes := 0
	for i := 0; i < 60; i++ {
		add(10, 1)
		if got := c.Workload(); got != w {
			changes++
			// Handed out again: the lag had just passed the tolerance.
			if lag := share(got, 10) - share(w, 10); lag <= allocator.WorkloadTolerance {
				t.Errorf("a new workload after a share moved by only %.4f", lag)
			}
			w = got
		}
	}
	// 60 pods move the 10-unit share from 0.500 to ~0.528: 2 new values.
	if changes != 2 {
		t.Errorf("%d new workloads in 60 pods of a known shape, want 2 (a share moving 0.028 in steps of ~0.0005, tolerance %.2f)", changes, allocator.WorkloadTolerance)
	}
	add(33, 1)
	if got := c.Workload(); got == w || len(got.Shapes) != 3 {
		t.Errorf("a new shape did not give a new workload at once: %+v", got.Shapes)
	}
}

// TestEverySnapshotIsSummarizedFromItsFinalCards: the cache summarizes
// every snapshot it publishes (allocator.Node.Summarize), after its cards,
// their use, isolation and whole-card holds are set, so the policies' totals
// fast path answers as a decision from the cards would. Each snapshot is
// evaluated twice, as published and as a copy without the summary, for
// every share size, after pods arrive, are assumed, forgotten and deleted.
// It fails if a snapshot is summarized before its cards are final, or not
// at all.
func TestEverySnapshotIsSummarizedFromItsFinalCards(t *testing.T) {
	binpack, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New()
	c.SetNode(fixture.MakeNode("mixed").Card(0, 40).Card(1, 80).CardOf(2, 80, "H100", api.CardUnhealthy).Obj())
	c.SetNode(fixture.MakeNode("isolated").Card(0, 40).Card(1, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "1").Obj())
	c.SetNode(fixture.MakeNode("broken").RawInventory(`{"version":1,`).Obj())
	c.SetNode(fixture.MakeNode("cpu-only").NoGPU().Allocatable("8", "32Gi").Obj())
	names := []string{"mixed", "isolated", "broken", "cpu-only"}
	check := func(step string) {
		t.Helper()
		for _, snap := range c.Snapshot(names) {
			if snap.Summarized() != (snap.InventoryErr == nil) {
				t.Fatalf("%s: node %s summarized %v with inventory error %v", step, snap.Name, snap.Summarized(), snap.InventoryErr)
			}
			plain := &allocator.Node{Name: snap.Name, Unit: snap.Unit, Cards: snap.Cards, InventoryErr: snap.InventoryErr, HostFree: snap.HostFree}
			for u := int64(1); u <= 81; u++ {
				req := allocator.Request{Demands: []allocator.Demand{{Container: "main", Units: u}}}
				got, want := binpack.Evaluate(snap, req, nil), binpack.Evaluate(plain, req, nil)
				if got.Fits != want.Fits || got.Score != want.Score || got.Message() != want.Message() {
					t.Fatalf("%s: node %s, %d units: the snapshot decides %+v, its cards %+v", step, snap.Name, u, got, want)
				}
			}
		}
	}
	check("empty")
	c.SetPod(podtest.Make("ns", "a").GPU("main", 30).AssignOn("mixed", api.PhaseAllocated, 1).Obj())
	c.SetPod(podtest.Make("ns", "b").GPU("main", 25).AssignOn("isolated", api.PhaseAllocated, 0).Obj())
	whole := podtest.Make("ns", "w").Whole("main", 1).AssignWholeOn("mixed", api.PhaseAllocated, nil, []int{0}).Obj()
	c.SetPod(whole)
	check("bound pods and a whole card")
	pod := podtest.Make("ns", "p").GPU("main", 50).Obj()
	if _, err := decideAndAssume(t, c, pod, "mixed"); err != nil {
		t.Fatal(err)
	}
	check("assumed")
	c.Forget(pod.UID)
	c.DeletePod(whole.UID)
	check("forgotten and deleted")
}
