// Package podtest builds pods for the device plugin's tests: bound to a node,
// requesting example.com/gpu-mem, with or without a gpushare assignment.
package podtest

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// Epoch is the creation time of a pod of age 0.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Card names a card in an assignment.
type Card struct {
	UUID  string
	Index int
}

// Builder builds one pod.
type Builder struct{ pod *corev1.Pod }

// Make starts a Pending pod "ns/name" with UID "uid-name", bound to node,
// created age seconds after Epoch.
func Make(node, name string, age int) *Builder {
	return &Builder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(Epoch.Add(time.Duration(age) * time.Second))},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

// Container adds an app container limiting units of example.com/gpu-mem
// (none when units is 0).
func (b *Builder) Container(name string, units int64) *Builder {
	c := corev1.Container{Name: name}
	if units > 0 {
		c.Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(units, resource.DecimalSI)}
	}
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, c)
	return b
}

// Assign writes a valid assignment in unit GiB: cards[i] for the i-th
// container requesting gpu-mem.
func (b *Builder) Assign(phase api.AssignmentPhase, cards ...Card) *Builder {
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: b.pod.UID, Node: b.pod.Spec.NodeName, Unit: api.UnitGiB, Phase: phase}
	i := 0
	for _, c := range b.pod.Spec.Containers {
		q, ok := c.Resources.Limits[api.DefaultNames().ResourceName()]
		if !ok {
			continue
		}
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, CardUUID: cards[i].UUID, CardIndex: cards[i].Index, Units: q.Value()})
		i++
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

// Sign signs the pod's assignment with keys, as the extender does; edit,
// when set, changes the record after signing (a tampered record).
func (b *Builder) Sign(keys api.RecordKeys, edit func(*api.Assignment)) *Builder {
	a, err := api.DecodeAssignment(b.pod.Annotations[api.DefaultNames().AnnotationAssignment()])
	if err != nil {
		panic(err)
	}
	if a, err = keys.Sign(a); err != nil {
		panic(err)
	}
	if edit != nil {
		edit(&a)
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	b.pod.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

// Whole adds an app container limiting n whole cards (api.Names.WholeResourceName).
func (b *Builder) Whole(name string, n int64) *Builder {
	c := corev1.Container{Name: name}
	c.Resources.Limits = corev1.ResourceList{api.DefaultNames().WholeResourceName(): *resource.NewQuantity(n, resource.DecimalSI)}
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, c)
	return b
}

// AssignWhole writes a valid assignment in unit GiB: shares[i] for the i-th
// container requesting gpu-mem, and consecutive cards of whole for the
// containers requesting whole cards, in order.
func (b *Builder) AssignWhole(phase api.AssignmentPhase, shares []Card, whole []Card) *Builder {
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: b.pod.UID, Node: b.pod.Spec.NodeName, Unit: api.UnitGiB, Phase: phase}
	for _, c := range b.pod.Spec.Containers {
		if q, ok := c.Resources.Limits[api.DefaultNames().ResourceName()]; ok {
			a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, CardUUID: shares[0].UUID, CardIndex: shares[0].Index, Units: q.Value()})
			shares = shares[1:]
		}
	}
	for _, c := range b.pod.Spec.Containers {
		q, ok := c.Resources.Limits[api.DefaultNames().WholeResourceName()]
		if !ok {
			continue
		}
		w := api.WholeCardAssignment{Name: c.Name}
		for _, card := range whole[:q.Value()] {
			w.CardUUIDs = append(w.CardUUIDs, card.UUID)
			w.CardIndexes = append(w.CardIndexes, card.Index)
		}
		whole = whole[q.Value():]
		a.WholeCards = append(a.WholeCards, w)
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

// InitContainer adds an init container limiting units of example.com/gpu-mem
// (the contract refuses it; the kubelet still asks for it).
func (b *Builder) InitContainer(name string, units int64) *Builder {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(units, resource.DecimalSI)}}}
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, c)
	return b
}

// Phase sets the pod's phase.
func (b *Builder) Phase(p corev1.PodPhase) *Builder {
	b.pod.Status.Phase = p
	return b
}

// Started gives the pod a container status (the kubelet admitted it)
// without changing its phase.
func (b *Builder) Started() *Builder {
	b.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "x"}}
	return b
}

// Running marks the pod admitted and running.
func (b *Builder) Running() *Builder {
	b.pod.Status.Phase = corev1.PodRunning
	return b
}

// Obj returns the pod.
func (b *Builder) Obj() *corev1.Pod { return b.pod }
