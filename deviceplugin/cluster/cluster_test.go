package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

const node = "gpu-node"

func inv(cards ...api.Card) api.Inventory {
	return api.Inventory{Version: api.InventoryVersion, Unit: api.UnitGiB, Cards: cards}
}

func card(i int, model string, units int64) api.Card {
	return api.Card{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: model, MemoryMiB: units * 1024, Units: units, State: api.CardHealthy}
}

func TestPublishWritesInventoryAndLabels(t *testing.T) {
	tests := []struct {
		name       string
		inv        api.Inventory
		wantLabels map[string]string
	}{
		{"same model", inv(card(0, "NVIDIA A100-SXM4-40GB", 40), card(1, "NVIDIA A100-SXM4-40GB", 40)), map[string]string{"keep": "me", api.DefaultNames().LabelGPUCount(): "2", api.DefaultNames().LabelGPUModel(): "NVIDIA-A100-SXM4-40GB", api.DefaultNames().LabelGPUMemory(): "40GiB"}},
		{"mixed models: largest card's memory", inv(card(0, "NVIDIA H100", 79), card(1, "NVIDIA A100", 40)), map[string]string{"keep": "me", api.DefaultNames().LabelGPUCount(): "2", api.DefaultNames().LabelGPUModel(): "mixed", api.DefaultNames().LabelGPUMemory(): "79GiB"}},
		{"no cards: model and memory labels removed", inv(), map[string]string{"keep": "me", api.DefaultNames().LabelGPUCount(): "0"}},
	}
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"keep": "me"}}})
	c := New(client, node)
	for _, tt := range tests { // in sequence on one Node: each publish replaces the last
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Publish(ctx, tt.inv, ""); err != nil {
				t.Fatal(err)
			}
			n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := api.DefaultNames().InventoryFromNode(n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.inv, got); diff != "" {
				t.Errorf("inventory (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLabels, n.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckNode(t *testing.T) {
	err := New(fake.NewClientset(), "missing").CheckNode(context.Background())
	if !errors.Is(err, ErrNodeNotFound) {
		t.Errorf("err = %v, want ErrNodeNotFound", err)
	}
}

func TestUpdateAssignment(t *testing.T) {
	ctx := context.Background()
	pod := podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, podtest.Card{UUID: "GPU-a", Index: 0}).Obj()
	client := fake.NewClientset(pod)
	c := New(client, node)
	setAllocated := func(a *api.Assignment) bool { a.Phase = api.PhaseAllocated; return true }

	if err := c.UpdateAssignment(ctx, "ns", "p", "another-uid", setAllocated); err != nil {
		t.Fatal(err)
	}
	if got := phaseOf(t, client); got != api.PhaseAssigned {
		t.Fatalf("a re-created pod (other UID) was written: phase %s", got)
	}
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, setAllocated); err != nil {
		t.Fatal(err)
	}
	if got := phaseOf(t, client); got != api.PhaseAllocated {
		t.Errorf("phase %s, want Allocated", got)
	}
	if err := c.UpdateAssignment(ctx, "ns", "gone", "uid-gone", setAllocated); err != nil {
		t.Errorf("a deleted pod: %v, want nil", err)
	}
}

// RepairAssignment writes the rebuilt record whatever the pod carried
// (here: none), and leaves alone a re-created pod, a deleted one, and a pod
// rebuild declines.
func TestRepairAssignment(t *testing.T) {
	ctx := context.Background()
	pod := podtest.Bound(node, "p", 1).GPU("c", 2).Obj()
	client := fake.NewClientset(pod)
	c := New(client, node)
	rebuilt := api.Assignment{Version: api.AssignmentVersion, PodUID: pod.UID, Node: node, Unit: api.UnitGiB, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: "c", CardUUID: "GPU-a", Units: 2}}}
	var saw *corev1.Pod
	rebuild := func(p *corev1.Pod) (api.Assignment, bool) { saw = p; return rebuilt, true }
	decline := func(*corev1.Pod) (api.Assignment, bool) { return api.Assignment{}, false }

	if err := c.RepairAssignment(ctx, "ns", "p", "another-uid", rebuild); err != nil || saw != nil {
		t.Fatalf("a re-created pod (other UID): err %v, rebuild called %v", err, saw != nil)
	}
	if err := c.RepairAssignment(ctx, "ns", "p", pod.UID, decline); err != nil {
		t.Fatal(err)
	}
	if p, _ := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); p.Annotations[api.DefaultNames().AnnotationAssignment()] != "" {
		t.Fatalf("a declined repair wrote %q", p.Annotations[api.DefaultNames().AnnotationAssignment()])
	}
	if err := c.RepairAssignment(ctx, "ns", "p", pod.UID, rebuild); err != nil {
		t.Fatal(err)
	}
	if got := phaseOf(t, client); got != api.PhaseAllocated || saw == nil || saw.Name != "p" {
		t.Errorf("after the repair: phase %s, rebuild saw %v", got, saw)
	}
	if err := c.RepairAssignment(ctx, "ns", "gone", "uid-gone", rebuild); err != nil {
		t.Errorf("a deleted pod: %v, want nil", err)
	}
}

func phaseOf(t *testing.T, client *fake.Clientset) api.AssignmentPhase {
	t.Helper()
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.DefaultNames().AssignmentFromPod(p)
	if err != nil {
		t.Fatal(err)
	}
	return a.Phase
}

// The order the pod informer first sees pods bound to the node is the order
// they were bound (the kubelet's admission order for pods created in the same
// second); a pod bound later than it was created, or one never seen, keeps
// its place; a deleted pod is forgotten.
func TestArrivalFollowsTheOrderPodsAreBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	c := New(client, node)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	unbound := podtest.Bound("", "late", 1).GPU("c", 1).Obj()
	if _, err := client.CoreV1().Pods("ns").Create(ctx, unbound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"z", "a"} {
		if _, err := client.CoreV1().Pods("ns").Create(ctx, podtest.Bound(node, name, 1).GPU("c", 1).Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unbound.Spec.NodeName = node // bound last
	if _, err := client.CoreV1().Pods("ns").Update(ctx, unbound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"uid-z": 0, "uid-a": 1, "uid-late": 2}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for uid := range want {
			if _, ok := c.Arrival(types.UID(uid)); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the informer did not see the three pods bound: %v", err)
	}
	got := map[string]uint64{}
	for uid := range want {
		n, _ := c.Arrival(types.UID(uid))
		got[uid] = n
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("arrival (-want +got):\n%s", diff)
	}
	if err := client.CoreV1().Pods("ns").Delete(ctx, "z", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok := c.Arrival("uid-z")
		return !ok, nil
	})
	if err != nil {
		t.Errorf("a deleted pod keeps its arrival: %v", err)
	}
}

// The wait of Allocate for a pod the kubelet saw first helps only while the
// cache is behind the API server: a pod of the node awaiting admission that
// the cache lacks. Pods admitted, being deleted, finished or of other nodes
// do not count; a pod deleted before its admission is on neither side.
func TestCacheBehind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := metav1.Now()
	deleting := podtest.Bound(node, "deleting", 1).GPU("c", 1).Obj()
	deleting.DeletionTimestamp = &now
	others := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		podtest.Bound(node, "running", 1).GPU("c", 1).Phase(corev1.PodRunning).Obj(),
		podtest.Bound(node, "started", 1).GPU("c", 1).Started().Obj(),
		podtest.Bound(node, "failed", 1).GPU("c", 1).Phase(corev1.PodFailed).Obj(),
		podtest.Bound("elsewhere", "other", 1).GPU("c", 1).Obj(),
		deleting,
	}
	// Not started: the cache is empty.
	if behind, err := New(fake.NewClientset(others...), node).CacheBehind(ctx); err != nil || behind {
		t.Errorf("no pod of the node awaits admission: CacheBehind = %v, %v; want false", behind, err)
	}
	client := fake.NewClientset(append(others, podtest.Bound(node, "p", 1).GPU("c", 1).Obj())...)
	c := New(client, node)
	if behind, err := c.CacheBehind(ctx); err != nil || !behind {
		t.Errorf("pod p awaits admission, the cache lacks it: CacheBehind = %v, %v; want true", behind, err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		behind, err := c.CacheBehind(ctx)
		return err == nil && !behind, nil
	}); err != nil {
		t.Errorf("the cache synced: CacheBehind still true: %v", err)
	}
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if behind, err := c.CacheBehind(ctx); err != nil || behind {
		t.Errorf("pod p deleted before its admission (the cache may still show it): CacheBehind = %v, %v; want false", behind, err)
	}
}

// A record write on a pod the cache has is one round trip (a patch
// conditional on the cached resourceVersion), not a read and a write: the
// kubelet's PreStartContainer waits for it. A stale copy (the patch
// conflicts) is read again and written on what the API server has.
func TestRecordWriteOnTheCachedPodIsOneRoundTrip(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, podtest.Card{UUID: "GPU-a", Index: 0}).Obj()
	client := fake.NewClientset(pod)
	c := New(client, node)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.cachedPod("ns", "p", pod.UID) != nil, nil
	}); err != nil {
		t.Fatal("the cache never showed the pod")
	}
	calls := func(from int) (lists, patches int) {
		for _, a := range client.Actions()[from:] {
			switch a.GetVerb() {
			case "list":
				lists++
			case "patch":
				patches++
			}
		}
		return lists, patches
	}
	from := len(client.Actions())
	setAllocated := func(a *api.Assignment) bool { a.Phase = api.PhaseAllocated; return true }
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, setAllocated); err != nil {
		t.Fatal(err)
	}
	if lists, patches := calls(from); lists != 0 || patches != 1 {
		t.Errorf("record write on a cached pod: %d reads, %d writes; want 0 and 1", lists, patches)
	}
	if got := phaseOf(t, client); got != api.PhaseAllocated {
		t.Errorf("phase %s, want Allocated", got)
	}

	conflicts := 1
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p", errors.New("the object has been modified"))
	})
	from = len(client.Actions())
	setAssigned := func(a *api.Assignment) bool { a.Phase = api.PhaseAssigned; return true }
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, setAssigned); err != nil {
		t.Fatal(err)
	}
	if lists, patches := calls(from); lists != 1 || patches != 2 {
		t.Errorf("record write on a stale cached pod: %d reads, %d writes; want the conflicted write, a read and a write", lists, patches)
	}
	if got := phaseOf(t, client); got != api.PhaseAssigned {
		t.Errorf("phase %s after the retried write, want Assigned", got)
	}
}

// With a reader (the node's own identity), every read of the node's pods and
// Node goes to it and the writer only writes: the writer's identity then
// needs no read permission at all.
func TestReadsGoToTheReaderAndWritesToTheClient(t *testing.T) {
	ctx := context.Background()
	pod := podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, podtest.Card{UUID: "GPU-a", Index: 0}).Obj()
	nodeObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	writer := fake.NewClientset(pod.DeepCopy(), nodeObj.DeepCopy())
	reader := fake.NewClientset(pod.DeepCopy(), nodeObj.DeepCopy())
	c := New(writer, node, WithReader(reader))
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckNode(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CacheBehind(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, func(a *api.Assignment) bool { a.Phase = api.PhaseAllocated; return true }); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, inv(card(0, "NVIDIA A100", 40)), ""); err != nil {
		t.Fatal(err)
	}
	verbs := func(cs *fake.Clientset) map[string]bool {
		out := map[string]bool{}
		for _, a := range cs.Actions() {
			out[a.GetVerb()+" "+a.GetResource().Resource] = true
		}
		return out
	}
	if diff := cmp.Diff(map[string]bool{"patch pods": true, "patch nodes": true}, verbs(writer)); diff != "" {
		t.Errorf("the writer's requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"list pods": true, "watch pods": true, "list nodes": true, "watch nodes": true, "get nodes": true}, verbs(reader)); diff != "" {
		t.Errorf("the reader's requests (-want +got):\n%s", diff)
	}
}

// PodsChanged is closed by the next event of a pod of the node, and only by one.
func TestPodsChangedClosesAtTheNextPodEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	c := New(client, node)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := func(ch <-chan struct{}, within time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(within):
			return false
		}
	}
	ch := c.PodsChanged()
	if closed(ch, 100*time.Millisecond) {
		t.Fatal("PodsChanged closed with no pod event")
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, podtest.Bound(node, "p", 1).GPU("c", 1).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !closed(ch, 10*time.Second) {
		t.Fatal("PodsChanged not closed 10 s after a pod of the node was added")
	}
	ch = c.PodsChanged()
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !closed(ch, 10*time.Second) {
		t.Fatal("PodsChanged not closed 10 s after the pod was deleted")
	}
}

// A record write is conditional on the record, not on the whole pod: the
// kubelet's status write after the pod cache's copy (the usual case in a
// burst, where the kubelet reports one pod while the plugin records the
// next) does not refuse it, so it stays one round trip. A record changed
// since the copy (another writer) is refused, read again and written on
// what the API server has.
func TestRecordWriteIsConditionalOnTheRecordOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, podtest.Card{UUID: "GPU-a", Index: 0}).Obj()
	pod.ResourceVersion = "10"
	writer := fake.NewClientset(pod.DeepCopy())
	podtest.APIServerPatches(writer)
	// The pod cache keeps the copy it listed first; a read of one pod (the
	// plugin lists by name) shows what the API server has.
	reader := fake.NewClientset(pod.DeepCopy())
	reader.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if !strings.Contains(action.(k8stesting.ListAction).GetListRestrictions().Fields.String(), "metadata.name") {
			return false, nil, nil
		}
		p, err := writer.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
		if err != nil {
			return true, nil, err
		}
		return true, &corev1.PodList{Items: []corev1.Pod{*p}}, nil
	})
	c := New(writer, node, WithReader(reader))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	// The kubelet reports the pod Running: the API server's pod moves on,
	// the plugin's copy does not (yet).
	running := pod.DeepCopy()
	running.Status.Phase, running.ResourceVersion = corev1.PodRunning, "11"
	if err := writer.Tracker().Update(pods, running, "ns"); err != nil {
		t.Fatal(err)
	}
	from := len(writer.Actions()) + len(reader.Actions())
	setAllocated := func(a *api.Assignment) bool { a.Phase = api.PhaseAllocated; return true }
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, setAllocated); err != nil {
		t.Fatalf("record write after the kubelet's status write: %v", err)
	}
	if n := len(writer.Actions()) + len(reader.Actions()) - from; n != 1 {
		t.Errorf("record write after the kubelet's status write: %d requests, want 1 (the write)", n)
	}
	if got := phaseOf(t, writer); got != api.PhaseAllocated {
		t.Errorf("phase %s, want Allocated", got)
	}
	got, _ := writer.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if !c.RecordAhead(pod) || c.RecordAhead(got) {
		t.Errorf("RecordAhead: %v for the copy before the write, %v for the pod as written; want true, false", c.RecordAhead(pod), c.RecordAhead(got))
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("the record write undid the kubelet's status: phase %q", got.Status.Phase)
	}

	// Another writer corrected the card meanwhile (the copy still shows
	// GPU-a, Assigned): the write tested the record, was refused, and the
	// plugin wrote on the record the API server has, keeping the card.
	moved := got.DeepCopy()
	a, err := api.DefaultNames().AssignmentFromPod(moved)
	if err != nil {
		t.Fatal(err)
	}
	a.Phase, a.Containers[0].CardUUID, a.Containers[0].CardIndex = api.PhaseAssigned, "GPU-b", 1
	s, err := api.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	moved.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	moved.ResourceVersion = "13"
	if err := writer.Tracker().Update(pods, moved, "ns"); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateAssignment(ctx, "ns", "p", pod.UID, setAllocated); err != nil {
		t.Fatalf("record write on a copy whose record changed: %v", err)
	}
	final, _ := writer.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	fa, err := api.DefaultNames().AssignmentFromPod(final)
	if err != nil {
		t.Fatal(err)
	}
	if fa.Phase != api.PhaseAllocated || fa.Containers[0].CardUUID != "GPU-b" {
		t.Errorf("record after the refused write and the retry: phase %s card %s, want Allocated on GPU-b (the other writer's card kept)", fa.Phase, fa.Containers[0].CardUUID)
	}
}
