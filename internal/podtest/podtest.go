// Package podtest builds the pods gpushare's tests use: the scheduler's, the
// device plugin's and the inspector's, and, on top of it, the end-to-end
// suite's. It is the one pod builder, in the style of kube-scheduler's
// st.MakePod():
//
//	podtest.Make("ns", "p").GPU("main", 10).AssignOn("n1", api.PhaseAssigned, 0).Obj()
//	podtest.Bound("gpu-node", "a", 1).GPU("c", 4).Assign(api.PhaseAssigned, c0).Obj()
//
// Records go through the api package's Encode functions, so a test only
// writes records the real programs would write, unless it edits one on
// purpose (EditAssignment). A builder panics on a mistake in the test itself
// (a record that cannot be valid, fewer cards than containers), as kube's
// do. Resource and annotation names are api.DefaultNames'.
package podtest

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// Epoch is the creation time of a pod of age 0 (Bound).
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Card names a card in an assignment.
type Card struct {
	UUID  string
	Index int
}

// CardUUID is the UUID the tests give card index on node (so that a node
// builder and a record name the same card): "GPU-<node>-<index>".
func CardUUID(node string, index int) string { return fmt.Sprintf("GPU-%s-%d", node, index) }

// CardsOn are the cards of node with the given indexes, named by CardUUID.
func CardsOn(node string, indexes ...int) []Card {
	out := make([]Card, 0, len(indexes))
	for _, i := range indexes {
		out = append(out, Card{UUID: CardUUID(node, i), Index: i})
	}
	return out
}

// Builder builds one pod.
type Builder struct {
	pod   corev1.Pod
	image string
}

// Make starts a pod namespace/name with the UID "uid-<namespace>-<name>",
// unbound, in no phase, with no containers.
func Make(namespace, name string) *Builder {
	return &Builder{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name),
	}}}
}

// Bound starts a pod as a node's device plugin finds it, placed but not yet
// admitted: "ns/name" with the UID "uid-<name>", bound to node, Pending,
// created age seconds after Epoch.
func Bound(node, name string, age int) *Builder {
	return Make("ns", name).UID("uid-" + name).Node(node).Phase(corev1.PodPending).
		Created(Epoch.Add(time.Duration(age) * time.Second))
}

// Obj returns a copy of the pod built so far.
func (b *Builder) Obj() *corev1.Pod {
	out := b.pod.DeepCopy()
	for i := range out.Spec.Containers {
		if out.Spec.Containers[i].Image == "" {
			out.Spec.Containers[i].Image = b.image
		}
	}
	return out
}

// UID sets the pod's UID ("" for a pod the API server is to create).
func (b *Builder) UID(uid string) *Builder { b.pod.UID = types.UID(uid); return b }

// Node binds the pod to a node (spec.nodeName).
func (b *Builder) Node(name string) *Builder { b.pod.Spec.NodeName = name; return b }

// Created sets the pod's creation time.
func (b *Builder) Created(t time.Time) *Builder {
	b.pod.CreationTimestamp = metav1.NewTime(t)
	return b
}

// Phase sets status.phase.
func (b *Builder) Phase(p corev1.PodPhase) *Builder { b.pod.Status.Phase = p; return b }

// Started gives the pod a container status (the kubelet admitted it)
// without changing its phase.
func (b *Builder) Started() *Builder { return b.ContainerStatus("x", "") }

// ContainerStatus adds the status of container name with its runtime ID
// (e.g. "containerd://<64 hex digits>"; "" for none).
func (b *Builder) ContainerStatus(name, containerID string) *Builder {
	b.pod.Status.ContainerStatuses = append(b.pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, ContainerID: containerID})
	return b
}

// ContainerReady adds the status of container name, ready or not (its readiness probe).
func (b *Builder) ContainerReady(name string, ready bool) *Builder {
	b.pod.Status.ContainerStatuses = append(b.pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, Ready: ready})
	return b
}

// Failed marks the pod Failed with the kubelet's reason and message (e.g.
// UnexpectedAdmissionError: refused at admission).
func (b *Builder) Failed(reason, message string) *Builder {
	b.pod.Status.Phase, b.pod.Status.Reason, b.pod.Status.Message = corev1.PodFailed, reason, message
	return b
}

// Unschedulable marks the pod Pending with the scheduler's
// PodScheduled=False condition carrying message.
func (b *Builder) Unschedulable(message string) *Builder {
	b.pod.Status.Phase = corev1.PodPending
	b.pod.Status.Conditions = append(b.pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message})
	return b
}

// Scheduled gives the pod the PodScheduled=True condition the API server
// sets when the pod is bound, at t.
func (b *Builder) Scheduled(t time.Time) *Builder {
	b.pod.Status.Conditions = append(b.pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t)})
	return b
}

// Deleting marks the pod terminating: deletionTimestamp set, its containers
// still in their grace period.
func (b *Builder) Deleting() *Builder {
	now := metav1.Now()
	b.pod.DeletionTimestamp = &now
	return b
}

// Priority sets spec.priority (what the priority admission plugin writes
// from the pod's PriorityClass).
func (b *Builder) Priority(p int32) *Builder { b.pod.Spec.Priority = &p; return b }

// Nominated sets status.nominatedNodeName (what kube-scheduler's preemption
// writes).
func (b *Builder) Nominated(node string) *Builder { b.pod.Status.NominatedNodeName = node; return b }

// Ready sets the pod's Ready condition (what the kubelet's readiness probe
// reports).
func (b *Builder) Ready(ready bool) *Builder {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	b.pod.Status.Conditions = append(b.pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: st})
	return b
}

// Annotation sets an annotation.
func (b *Builder) Annotation(k, v string) *Builder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

// Label sets a label.
func (b *Builder) Label(k, v string) *Builder {
	if b.pod.Labels == nil {
		b.pod.Labels = map[string]string{}
	}
	b.pod.Labels[k] = v
	return b
}

// Image is the image of every container Obj returns that names none.
func (b *Builder) Image(image string) *Builder { b.image = image; return b }

// Container adds an app container asking for no GPU.
func (b *Builder) Container(name string) *Builder {
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, corev1.Container{Name: name})
	return b
}

// GPU adds an app container limiting units of gpu-mem (0 included: an
// invalid request).
func (b *Builder) GPU(name string, units int64) *Builder {
	return b.Limit(name, api.DefaultNames().ResourceName(), *resource.NewQuantity(units, resource.DecimalSI))
}

// GPUQuantity adds an app container asking for a gpu-mem quantity given as
// a string (for invalid requests such as "-1" or "1500m").
func (b *Builder) GPUQuantity(name, q string) *Builder {
	return b.Limit(name, api.DefaultNames().ResourceName(), resource.MustParse(q))
}

// Whole adds an app container limiting n whole cards
// (api.Names.WholeResourceName).
func (b *Builder) Whole(name string, n int64) *Builder {
	return b.Limit(name, api.DefaultNames().WholeResourceName(), *resource.NewQuantity(n, resource.DecimalSI))
}

// WholeQuantity adds an app container asking for a whole-card quantity given
// as a string (for invalid requests such as "0" or "500m").
func (b *Builder) WholeQuantity(name, q string) *Builder {
	return b.Limit(name, api.DefaultNames().WholeResourceName(), resource.MustParse(q))
}

// Limit adds an app container limiting q of any resource.
func (b *Builder) Limit(name string, res corev1.ResourceName, q resource.Quantity) *Builder {
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, limited(name, res, q))
	return b
}

// InitGPU adds an init container limiting units of gpu-mem (the contract
// refuses it; the kubelet still asks for it).
func (b *Builder) InitGPU(name string, units int64) *Builder {
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers,
		limited(name, api.DefaultNames().ResourceName(), *resource.NewQuantity(units, resource.DecimalSI)))
	return b
}

func limited(name string, res corev1.ResourceName, q resource.Quantity) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: q}}}
}

// Host sets the first container's CPU and memory requests (add a container
// first), e.g. Host("2", "4Gi").
func (b *Builder) Host(cpu, memory string) *Builder {
	c := &b.pod.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(memory)
	return b
}
