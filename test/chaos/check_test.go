package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// Builders: one node "n" with cards A (24 units) and B (40 units).

const (
	cardA = "GPU-aaaa"
	cardB = "GPU-bbbb"
)

func testNode(t *testing.T) *corev1.Node {
	t.Helper()
	inv := api.Inventory{Version: api.InventoryVersion, Unit: "GiB", Cards: []api.Card{
		{Index: 0, UUID: cardA, MemoryMiB: 24 * 1024, Units: 24, State: api.CardHealthy},
		{Index: 1, UUID: cardB, MemoryMiB: 40 * 1024, Units: 40, State: api.CardHealthy},
	}}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{api.DefaultNames().AnnotationInventory(): s}},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(64, resource.DecimalSI)}},
	}
}

// pod is a pod with one container c0 asking for units.
type pod struct{ *corev1.Pod }

func newPod(name string, units int64) pod {
	return pod{podtest.Make("ns", name).UID("uid-"+name).Phase(corev1.PodPending).GPU("c0", units).Obj()}
}

// assigned binds the pod to "n" with a record naming card (Allocated).
func (p pod) assigned(t *testing.T, card string) pod {
	t.Helper()
	index := 0
	if card == cardB {
		index = 1
	}
	p.Spec.NodeName = "n"
	a := podtest.Record(p.Pod, "n", api.PhaseAllocated, []podtest.Card{{UUID: card, Index: index}}, nil)
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, api.DefaultNames().AnnotationAssignment(), podtest.MustEncode(a))
	return p
}

// running marks the pod Running with run options of units first..first+n-1
// of card (what the device manager gave it).
func (p pod) running(t *testing.T, card string, first int64) pod {
	t.Helper()
	units := p.Spec.Containers[0].Resources.Limits[api.DefaultNames().ResourceName()]
	rec := nodeagent.ContainerRecord{Name: "c0", DeviceIDs: map[string][]string{string(api.DefaultNames().ResourceName()): ids(card, first, units.Value())},
		Env:    map[string]string{api.EnvCardUUID: card},
		Mounts: []nodeagent.Mount{{ContainerPath: api.VisibleDevicesVolumeRoot + "/" + card, HostPath: "/dev/null"}}}
	s, err := nodeagent.ContainerRecords{Version: nodeagent.RecordVersion, Node: "n", Containers: []nodeagent.ContainerRecord{rec}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, api.DefaultNames().AnnotationSimulatedContainers(), s)
	p.Status.Phase = corev1.PodRunning
	return p
}

func (p pod) unschedulable(reason, message string) pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message}}
	return p
}

func ids(card string, first, n int64) []string {
	var out []string
	for i := first; i < first+n; i++ {
		out = append(out, api.UnitID(card, i))
	}
	return out
}

func observation(t *testing.T, pods ...pod) *Observation {
	obs := &Observation{Nodes: map[string]*corev1.Node{"n": testNode(t)}, Kubelet: map[string]KubeletAccount{}, KubeletErr: map[string]error{}}
	for _, p := range pods {
		obs.Pods = append(obs.Pods, *p.Pod)
	}
	return obs
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func TestChecksFindEachBrokenInvariantAndPassAHealthyState(t *testing.T) {
	cannotFit := "0/3 nodes are available: 3 Insufficient example.com/gpu-mem. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	extenderSays := `0/3 nodes are available: 3 no single card has 30 GiB free for container "c0"; largest free is 20 GiB on card 1.`
	now := metav1.NewTime(time.Now())
	cases := []struct {
		name    string
		obs     func(t *testing.T) *Observation
		exp     Expect
		want    string // the invariant broken; "" for none
		detail  string // a part of the detail
		checkFn func(*Observation, Expect) []Violation
	}{
		{name: "healthy: two pods on their cards, one pending with the extender's reason",
			obs: func(t *testing.T) *Observation {
				o := observation(t, newPod("a", 16).assigned(t, cardA).running(t, cardA, 0), newPod("b", 30).assigned(t, cardB).running(t, cardB, 0),
					newPod("c", 30).unschedulable(corev1.PodReasonUnschedulable, extenderSays))
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/a": {"c0": ids(cardA, 0, 16)}, "ns/b": {"c0": ids(cardB, 0, 30)}}}
				o.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 16}, {UUID: cardB, Capacity: 40, Used: 30}}}}
				return o
			},
			exp: Expect{Live: map[string]types.UID{"a": "uid-a", "b": "uid-b", "c": "uid-c"}, LargestCard: 40}},
		{name: "records put 32 units on a card of 24", want: InvRecordsCapacity, detail: "records hold 32 of 24",
			obs: func(t *testing.T) *Observation {
				// The second pod is bound, not admitted yet: its record counts.
				return observation(t, newPod("a", 16).assigned(t, cardA).running(t, cardA, 0), newPod("b", 16).assigned(t, cardA))
			}},
		{name: "a pod being deleted still holds its units", want: InvRecordsCapacity,
			obs: func(t *testing.T) *Observation {
				gone := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
				gone.DeletionTimestamp = &now
				return observation(t, gone, newPod("b", 16).assigned(t, cardA))
			}},
		{name: "a pod being deleted whose units the kubelet released and handed to the next pod",
			obs: func(t *testing.T) *Observation {
				// The kubelet frees the devices of a pod whose containers
				// stopped before the API server deletes the object.
				gone := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
				gone.DeletionTimestamp = &now
				o := observation(t, gone, newPod("b", 16).assigned(t, cardA).running(t, cardA, 0))
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/b": {"c0": ids(cardA, 0, 16)}}}
				o.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 32, Pods: []api.ExtenderPod{
					{Namespace: "ns", Name: "a", Container: "c0", Units: 16, Phase: api.PhaseAllocated},
					{Namespace: "ns", Name: "b", Container: "c0", Units: 16, Phase: api.PhaseAllocated}}}}}}
				return o
			}},
		{name: "a pod being deleted that the kubelet still holds units for", want: InvRecordsCapacity, detail: "records hold 32 of 24",
			obs: func(t *testing.T) *Observation {
				gone := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
				gone.DeletionTimestamp = &now
				o := observation(t, gone, newPod("b", 16).assigned(t, cardA))
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/a": {"c0": ids(cardA, 0, 16)}}}
				return o
			}},
		{name: "the extender counts a pod being deleted that the kubelet still holds", want: InvExtenderCapacity,
			obs: func(t *testing.T) *Observation {
				gone := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
				gone.DeletionTimestamp = &now
				o := observation(t, gone)
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/a": {"c0": ids(cardA, 0, 16)}}}
				o.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 32, Pods: []api.ExtenderPod{
					{Namespace: "ns", Name: "a", Container: "c0", Units: 16, Phase: api.PhaseAllocated},
					{Namespace: "ns", Name: "b", Container: "c0", Units: 16, Phase: api.PhaseAllocated}}}}}}
				return o
			}},
		{name: "a failed pod holds nothing",
			obs: func(t *testing.T) *Observation {
				failed := newPod("a", 16).assigned(t, cardA)
				failed.Status.Phase = corev1.PodFailed
				return observation(t, failed, newPod("b", 16).assigned(t, cardA).running(t, cardA, 0))
			}},
		{name: "the kubelet gave one unit to two containers", want: InvKubeletCapacity, detail: "held by ns/a/c0 and ns/b/c0",
			obs: func(t *testing.T) *Observation {
				o := observation(t)
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/a": {"c0": ids(cardA, 0, 3)}, "ns/b": {"c0": ids(cardA, 2, 3)}}}
				return o
			}},
		{name: "the run options of two running pods share a unit", want: InvKubeletCapacity, detail: "in the run options of",
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("a", 4).assigned(t, cardA).running(t, cardA, 0), newPod("b", 4).assigned(t, cardA).running(t, cardA, 3))
			}},
		{name: "the extender counts more than the card has", want: InvExtenderCapacity,
			obs: func(t *testing.T) *Observation {
				o := observation(t)
				o.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 28}}}}
				return o
			}},
		{name: "a running container's record names another card than its units", want: InvRunningRecord, detail: "the kubelet gave 16 units of [GPU-bbbb]",
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("a", 16).assigned(t, cardA).running(t, cardB, 0))
			}},
		{name: "PodResources names another card than the record", want: InvRunningRecord, detail: "PodResources says",
			obs: func(t *testing.T) *Observation {
				o := observation(t, newPod("a", 16).assigned(t, cardA).running(t, cardA, 0))
				o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{"ns/a": {"c0": ids(cardB, 0, 16)}}}
				return o
			}},
		{name: "a running GPU pod without a record", want: InvNoRecord,
			obs: func(t *testing.T) *Observation {
				p := newPod("a", 16).running(t, cardA, 0)
				p.Spec.NodeName = "n"
				return observation(t, p)
			}},
		{name: "healthy: finally, a running pod's record names its card and is still Assigned (the plugin writes no phase then)", exp: Expect{Final: true},
			obs: func(t *testing.T) *Observation {
				p := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
				a, _ := api.DefaultNames().AssignmentFromPod(p.Pod)
				a.Phase = api.PhaseAssigned
				p.Annotations[api.DefaultNames().AnnotationAssignment()], _ = api.EncodeAssignment(a)
				return observation(t, p)
			}},
		{name: "finally, a running pod's whole-card record must be Allocated", want: InvSettled, exp: Expect{Final: true},
			obs: func(t *testing.T) *Observation {
				p := podtest.Make("ns", "w").UID("uid-w").Whole("c1", 1).Obj()
				p.Spec.NodeName, p.Status.Phase = "n", corev1.PodRunning
				a := podtest.Record(p, "n", api.PhaseAssigned, nil, []podtest.Card{{UUID: cardB, Index: 1}})
				metav1.SetMetaDataAnnotation(&p.ObjectMeta, api.DefaultNames().AnnotationAssignment(), podtest.MustEncode(a))
				return observation(t, pod{p})
			}},
		{name: "a pod larger than any card pends with only kube-scheduler's reason", want: InvPendingReason, detail: "more than the largest card (40)",
			exp: Expect{LargestCard: 40},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("big", 50).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
			}},
		{name: "while running, a pod that fits a card may pend on kube-scheduler's Insufficient", exp: Expect{LargestCard: 40},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
			}},
		{name: "finally, kube-scheduler's Insufficient must be true", want: InvPendingReason, detail: "node n has 64 allocatable units free",
			exp: Expect{LargestCard: 40, Final: true},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
			}},
		{name: "finally, with the node full, kube-scheduler's Insufficient is the reason", exp: Expect{LargestCard: 40, Final: true},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("a", 24).assigned(t, cardA).running(t, cardA, 0), newPod("b", 30).assigned(t, cardB).running(t, cardB, 0),
					newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
			}},
		{name: "an unschedulable message without any reason", want: InvPendingReason, exp: Expect{LargestCard: 40},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, "0/3 nodes are available: 3 ."))
			}},
		{name: "while running, a scheduler error (extender restarting) is transient", exp: Expect{LargestCard: 40},
			obs: func(t *testing.T) *Observation {
				return observation(t, newPod("p", 30).unschedulable("SchedulerError", "Post \"http://127.0.0.1:1/filter\": connection refused"))
			}},
		{name: "finally, a pod never judged", want: InvPendingReason, detail: "never judged", exp: Expect{LargestCard: 40, Final: true},
			obs: func(t *testing.T) *Observation { return observation(t, newPod("p", 30)) }},
		{name: "a pod the run created and never deleted is gone", want: InvLost, exp: Expect{Live: map[string]types.UID{"p": "uid-p"}},
			obs: func(t *testing.T) *Observation { return observation(t) }},
		{name: "a pod of the run's name with another UID", want: InvLost, detail: "created with UID uid-old", exp: Expect{Live: map[string]types.UID{"p": "uid-old"}},
			obs: func(t *testing.T) *Observation { return observation(t, newPod("p", 4)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check(tc.obs(t), tc.exp)
			if tc.want == "" {
				if len(vs) > 0 {
					t.Fatalf("violations in a healthy state: %v", vs)
				}
				return
			}
			found := false
			for _, v := range vs {
				found = found || v.Invariant == tc.want && strings.Contains(v.Detail, tc.detail)
			}
			if !found {
				t.Errorf("want %q with %q, got %v", tc.want, tc.detail, vs)
			}
		})
	}
}

func TestCheckZero(t *testing.T) {
	clean := func(t *testing.T) *Observation {
		o := observation(t)
		o.Kubelet["n"] = KubeletAccount{Containers: map[string]map[string][]string{}, Allocatable: append(ids(cardA, 0, 24), ids(cardB, 0, 40)...)}
		o.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24}, {UUID: cardB, Capacity: 40}}}}
		return o
	}
	zero := map[string]int64{cardA: 0, cardB: 0}
	if vs := CheckZero(clean(t), zero); len(vs) > 0 {
		t.Fatalf("violations when everything is back to zero: %v", vs)
	}
	for name, tc := range map[string]struct {
		mutate    func(o *Observation)
		inspector map[string]int64
		detail    string
	}{
		"a pod is left":                   {func(o *Observation) { o.Pods = append(o.Pods, *newPod("p", 1).Pod) }, zero, "1 left: p"},
		"the extender still counts units": {func(o *Observation) { o.Extender["n"].Cards[0].Used = 4 }, zero, "the extender counts 4 units used"},
		"the inspector still shows units": {func(o *Observation) {}, map[string]int64{cardA: 3, cardB: 0}, "the inspector shows 3 units allocated"},
		"the kubelet still holds units":   {func(o *Observation) { o.Kubelet["n"].Containers["ns/p"] = map[string][]string{"c0": ids(cardA, 0, 2)} }, zero, "the kubelet still has 2 units"},
		"the kubelet offers fewer units": {func(o *Observation) {
			acc := o.Kubelet["n"]
			acc.Allocatable = acc.Allocatable[1:]
			o.Kubelet["n"] = acc
		}, zero, "the kubelet offers 63 units"},
		"a card is still isolated":   {func(o *Observation) { isolate(t, o.Nodes["n"]) }, zero, "inventory state isolated"},
		"the kubelet did not answer": {func(o *Observation) { delete(o.Kubelet, "n"); o.KubeletErr["n"] = fmt.Errorf("refused") }, zero, "no PodResources answer"},
		"allocatable short of the inventory": {func(o *Observation) {
			o.Nodes["n"].Status.Allocatable[api.DefaultNames().ResourceName()] = resource.MustParse("40")
		}, zero, "allocatable"},
	} {
		t.Run(name, func(t *testing.T) {
			o := clean(t)
			tc.mutate(o)
			vs := CheckZero(o, tc.inspector)
			found := false
			for _, v := range vs {
				found = found || v.Invariant == InvZero && strings.Contains(v.Detail, tc.detail)
			}
			if !found {
				t.Errorf("want %q, got %v", tc.detail, vs)
			}
		})
	}
}

func isolate(t *testing.T, n *corev1.Node) {
	t.Helper()
	inv, err := api.DefaultNames().InventoryFromNode(n)
	if err != nil {
		t.Fatal(err)
	}
	inv.Cards[0].State, inv.Cards[0].Reason = api.CardIsolated, "operator"
	s, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[api.DefaultNames().AnnotationInventory()] = s
}

func TestHasExtenderReason(t *testing.T) {
	for msg, want := range map[string]bool{
		`0/2 nodes are available: 2 container "c0" asks for 85 GiB, more than any card holds (largest is 80 GiB).`:           true,
		`0/2 nodes are available: 1 no schedulable GPU for container "c0" (2 isolated), 1 Insufficient example.com/gpu-mem.`: true,
		`0/2 nodes are available: 2 Insufficient example.com/gpu-mem.`:                                                       false,
		`0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.`:                                      false,
	} {
		if got := HasExtenderReason(msg); got != want {
			t.Errorf("HasExtenderReason(%q) = %v, want %v", msg, got, want)
		}
	}
}

// planned binds the pod to "n" with a record naming card in phase Assigned:
// the extender's plan, not admitted yet.
func (p pod) planned(t *testing.T, card string) pod {
	t.Helper()
	p = p.assigned(t, card)
	a, err := api.DefaultNames().AssignmentFromPod(p.Pod)
	if err != nil {
		t.Fatal(err)
	}
	a.Phase = api.PhaseAssigned
	if p.Annotations[api.DefaultNames().AnnotationAssignment()], err = api.EncodeAssignment(a); err != nil {
		t.Fatal(err)
	}
	return p
}

func has(vs []Violation, invariant string) bool {
	for _, v := range vs {
		if v.Invariant == invariant {
			return true
		}
	}
	return false
}

// What the kubelet allocated counts at every observation; plans (records of
// pods not admitted yet, the extender's whole count) at the end.
func TestAllocationsCountAtEveryObservationPlansAtTheEnd(t *testing.T) {
	running := newPod("a", 16).assigned(t, cardA).running(t, cardA, 0)
	plan := observation(t, running, newPod("b", 16).planned(t, cardA))
	if vs := Check(plan, Expect{}); has(vs, InvRecordsCapacity) || has(vs, InvRecordsPlans) {
		t.Errorf("a plan over a card whose allocations fit, while the run goes on: got %v; want none", invariants(vs))
	}
	if vs := Check(plan, Expect{Final: true}); !has(vs, InvRecordsPlans) {
		t.Errorf("a plan over a card at the end: got %v; want %q", invariants(vs), InvRecordsPlans)
	}
	allocated := observation(t, running, newPod("b", 16).assigned(t, cardA))
	if vs := Check(allocated, Expect{}); !has(vs, InvRecordsCapacity) {
		t.Errorf("two Allocated records hold 32 of 24: got %v; want %q", invariants(vs), InvRecordsCapacity)
	}

	ext := observation(t)
	ext.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 32, Pods: []api.ExtenderPod{
		{Name: "a", Units: 16, Phase: api.PhaseAllocated}, {Name: "b", Units: 16, Phase: api.PhaseAssigned}}}}}}
	if vs := Check(ext, Expect{}); has(vs, InvExtenderCapacity) || has(vs, InvExtenderPlans) {
		t.Errorf("the extender counts a plan over capacity while the run goes on: got %v; want none", invariants(vs))
	}
	if vs := Check(ext, Expect{Final: true}); !has(vs, InvExtenderPlans) {
		t.Errorf("the extender counts a plan over capacity at the end: got %v; want %q", invariants(vs), InvExtenderPlans)
	}
	ext.Extender["n"].Cards[0].Pods[1].Phase = api.PhaseAllocated
	if vs := Check(ext, Expect{}); !has(vs, InvExtenderCapacity) {
		t.Errorf("the extender counts 32 of 24 in Allocated records: got %v; want %q", invariants(vs), InvExtenderCapacity)
	}
}

// A pod the run deleted, gone from the List but still in the extender's view
// (its informer is behind), and the pod the kubelet gave its units to: no
// violation. A pod missing from the List that the run did not delete still
// counts.
func TestDeletedPodsTheExtenderStillCountsAreReleased(t *testing.T) {
	next := newPod("next", 16).assigned(t, cardA).running(t, cardA, 0)
	obs := observation(t, next)
	obs.Extender = map[string]api.ExtenderNode{"n": {Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 32, Pods: []api.ExtenderPod{
		{Namespace: "ns", Name: "gone", Container: "c0", Units: 16, Phase: api.PhaseAllocated},
		{Namespace: "ns", Name: "next", Container: "c0", Units: 16, Phase: api.PhaseAllocated}}}}}}
	if vs := Check(obs, Expect{}); !has(vs, InvExtenderCapacity) {
		t.Fatalf("a pod nobody deleted, missing from the List: got %v; want %q", invariants(vs), InvExtenderCapacity)
	}
	obs.Deleted = map[string]bool{"ns/gone": true}
	if vs := Check(obs, Expect{}); has(vs, InvExtenderCapacity) {
		t.Errorf("the run deleted it and the List no longer has it: got %v; want none", invariants(vs))
	}
	obs.Deleted = map[string]bool{"ns/next": true}
	if vs := Check(obs, Expect{}); !has(vs, InvExtenderCapacity) {
		t.Errorf("a deleted pod the List still has (and the kubelet holds) counts: got %v; want %q", invariants(vs), InvExtenderCapacity)
	}
}

// The run is not at rest while an unbound pod's Insufficient is older than
// the room a node has now: kube-scheduler tries it again after a backoff.
func TestNotSettledWhileAnInsufficientJudgmentIsStale(t *testing.T) {
	cannotFit := "0/3 nodes are available: 3 Insufficient example.com/gpu-mem. no new claims to deallocate"
	stale := observation(t, newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
	if why := unsettled(stale); !strings.Contains(why, "has not tried it again") {
		t.Errorf("unsettled = %q; want the stale judgment", why)
	}
	full := observation(t, newPod("a", 24).assigned(t, cardA).running(t, cardA, 0), newPod("b", 30).assigned(t, cardB).running(t, cardB, 0),
		newPod("p", 30).unschedulable(corev1.PodReasonUnschedulable, cannotFit))
	if why := unsettled(full); why != "" {
		t.Errorf("unsettled = %q with the node full; want at rest", why)
	}
}
