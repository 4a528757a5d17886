package inspect

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// Builders for the objects the tests feed the inspector, in the style of
// kube's st.MakePod(): start with makeNode/makePod, chain, end with obj().
// Inventories and assignments go through the api package's Encode functions,
// so the tests only ever write records the real programs would write.

type nodeBuilder struct {
	t testing.TB
	n corev1.Node
}

func makeNode(t testing.TB, name, ip string) *nodeBuilder {
	t.Helper()
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}, Labels: map[string]string{}}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalIP, Address: ip},
		}
	}
	return &nodeBuilder{t: t, n: n}
}

// capacity sets the kubelet-reported gpu-mem capacity and allocatable.
func (b *nodeBuilder) capacity(capacity, allocatable int64) *nodeBuilder {
	if b.n.Status.Capacity == nil {
		b.n.Status.Capacity = corev1.ResourceList{}
		b.n.Status.Allocatable = corev1.ResourceList{}
	}
	b.n.Status.Capacity[api.DefaultNames().ResourceName()] = *resource.NewQuantity(capacity, resource.DecimalSI)
	b.n.Status.Allocatable[api.DefaultNames().ResourceName()] = *resource.NewQuantity(allocatable, resource.DecimalSI)
	return b
}

// inventory publishes cards in unit, and sets capacity and allocatable the
// way a healthy device plugin makes the kubelet report them: every card's
// units, and the healthy cards' units.
func (b *nodeBuilder) inventory(unit api.MemoryUnit, cards ...api.Card) *nodeBuilder {
	b.t.Helper()
	b.rawInventory(unit, cards...)
	var all, healthy int64
	for _, c := range cards {
		all += c.Units
		if c.Schedulable() {
			healthy += c.Units
		}
	}
	return b.capacity(all, healthy)
}

// rawInventory publishes cards without touching capacity.
func (b *nodeBuilder) rawInventory(unit api.MemoryUnit, cards ...api.Card) *nodeBuilder {
	b.t.Helper()
	for i := range cards {
		if cards[i].MemoryMiB == 0 {
			cards[i].MemoryMiB = cards[i].Units * unit.MiB()
		}
	}
	s, err := api.EncodeInventory(api.Inventory{Version: api.InventoryVersion, Unit: unit, Cards: cards})
	if err != nil {
		b.t.Fatalf("building node %s: %v", b.n.Name, err)
	}
	return b.annotate(api.DefaultNames().AnnotationInventory(), s)
}

func (b *nodeBuilder) annotate(key, value string) *nodeBuilder {
	b.n.Annotations[key] = value
	return b
}

func (b *nodeBuilder) label(key, value string) *nodeBuilder {
	b.n.Labels[key] = value
	return b
}

func (b *nodeBuilder) cordoned() *nodeBuilder {
	b.n.Spec.Unschedulable = true
	return b
}

func (b *nodeBuilder) obj() *corev1.Node { return b.n.DeepCopy() }

// gpu is a healthy card; its UUID is derived from node and index so that
// tests can name it again in assignments.
func gpu(node string, index int, model string, units int64) api.Card {
	return api.Card{Index: index, UUID: cardUUID(node, index), Model: model, Units: units, State: api.CardHealthy}
}

func cardUUID(node string, index int) string { return fmt.Sprintf("GPU-%s-%d", node, index) }

func withState(c api.Card, state api.CardState, reason string) api.Card {
	c.State, c.Reason = state, reason
	return c
}

type podBuilder struct {
	t testing.TB
	p corev1.Pod
}

// makePod returns a Running pod with a UID derived from its name, as the API
// server would have given it.
func makePod(t testing.TB, namespace, name string) *podBuilder {
	return &podBuilder{t: t, p: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name), Annotations: map[string]string{}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

// container adds an app container asking for units of gpu-mem (none when 0).
func (b *podBuilder) container(name string, units int64) *podBuilder {
	c := corev1.Container{Name: name, Image: "busybox"}
	if units > 0 {
		c.Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(units, resource.DecimalSI)}
	}
	b.p.Spec.Containers = append(b.p.Spec.Containers, c)
	return b
}

func (b *podBuilder) node(name string) *podBuilder {
	b.p.Spec.NodeName = name
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder {
	b.p.Status.Phase = p
	return b
}

// deleting marks the pod terminating: deletionTimestamp set, containers
// still in their grace period.
func (b *podBuilder) deleting() *podBuilder {
	now := metav1.Now()
	b.p.DeletionTimestamp = &now
	return b
}

// on is where one container goes: card index on the pod's node.
type on struct {
	container string
	card      int
	units     int64
}

// assign writes the extender's record for the pod's node (set node first),
// in unit GiB, naming each card by the UUID gpu() gives it.
func (b *podBuilder) assign(phase api.AssignmentPhase, placements ...on) *podBuilder {
	b.t.Helper()
	return b.assignIn(api.UnitGiB, b.p.Spec.NodeName, phase, placements...)
}

func (b *podBuilder) assignIn(unit api.MemoryUnit, node string, phase api.AssignmentPhase, placements ...on) *podBuilder {
	b.t.Helper()
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: b.p.UID, Node: node, Unit: unit, Phase: phase}
	for _, p := range placements {
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: p.container, CardUUID: cardUUID(node, p.card), CardIndex: p.card, Units: p.units})
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		b.t.Fatalf("building pod %s/%s: %v", b.p.Namespace, b.p.Name, err)
	}
	b.p.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

func (b *podBuilder) annotate(key, value string) *podBuilder {
	b.p.Annotations[key] = value
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.p.DeepCopy() }
