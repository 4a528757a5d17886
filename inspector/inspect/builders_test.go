package inspect

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// Builders for the nodes the tests feed the inspector, in the style of
// kube's st.MakeNode(): start with makeNode, chain, end with obj(). Pods come
// from internal/podtest (runningPod). Inventories and assignments go through
// the api package's Encode functions, so the tests only ever write records
// the real programs would write.

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

// gpu is a healthy card; its UUID is podtest.CardUUID's, so that the pods'
// records (podtest's AssignOn) name it.
func gpu(node string, index int, model string, units int64) api.Card {
	return api.Card{Index: index, UUID: podtest.CardUUID(node, index), Model: model, Units: units, State: api.CardHealthy}
}

func withState(c api.Card, state api.CardState, reason string) api.Card {
	c.State, c.Reason = state, reason
	return c
}

// runningPod starts a pod the way the inspector's tests mostly see one:
// Running, with a UID derived from its namespace and name.
func runningPod(namespace, name string) *podtest.Builder {
	return podtest.Make(namespace, name).Phase(corev1.PodRunning)
}
