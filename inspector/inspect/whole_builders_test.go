package inspect

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"testing"

	"github.com/gpushare/gpushare/api"
)

// wholeContainer adds an app container asking for n whole cards.
func (b *podBuilder) wholeContainer(name string, n int64) *podBuilder {
	c := corev1.Container{Name: name, Image: "busybox"}
	c.Resources.Limits = corev1.ResourceList{api.DefaultNames().WholeResourceName(): *resource.NewQuantity(n, resource.DecimalSI)}
	b.p.Spec.Containers = append(b.p.Spec.Containers, c)
	return b
}

// assignWhole writes the extender's record with shares and, for container
// whole, the cards given whole (indexes on the pod's node).
func (b *podBuilder) assignWhole(phase api.AssignmentPhase, whole string, cards []int, shares ...on) *podBuilder {
	b.t.Helper()
	node := b.p.Spec.NodeName
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: b.p.UID, Node: node, Unit: api.UnitGiB, Phase: phase}
	for _, p := range shares {
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: p.container, CardUUID: cardUUID(node, p.card), CardIndex: p.card, Units: p.units})
	}
	w := api.WholeCardAssignment{Name: whole}
	for _, i := range cards {
		w.CardUUIDs = append(w.CardUUIDs, cardUUID(node, i))
		w.CardIndexes = append(w.CardIndexes, i)
	}
	a.WholeCards = []api.WholeCardAssignment{w}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		b.t.Fatalf("building pod %s/%s: %v", b.p.Namespace, b.p.Name, err)
	}
	b.p.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

// wholeCardsScenario: a node of four cards, two given whole to one
// container of a mixed pod whose other container shares card 0, one pod
// pending on card 3 whole, and a pod that bypassed the scheduler. The
// kubelet's allocatable leaves out the units of cards 1 and 2, which the
// device plugin reports unhealthy while they are held whole.
func wholeCardsScenario(t *testing.T) []runtime.Object {
	return []runtime.Object{
		makeNode(t, "gpu-w", "10.0.7.1").inventory(api.UnitGiB, gpu("gpu-w", 0, a100, 40), gpu("gpu-w", 1, a100, 40), gpu("gpu-w", 2, a100, 40), gpu("gpu-w", 3, a100, 40)).capacity(160, 80).obj(),
		makePod(t, "ml", "train").container("infer", 10).wholeContainer("trainer", 2).node("gpu-w").assignWhole(api.PhaseAllocated, "trainer", []int{1, 2}, on{"infer", 0, 10}).obj(),
		makePod(t, "ml", "next").wholeContainer("main", 1).node("gpu-w").assignWhole(api.PhaseAssigned, "main", []int{3}).phase(corev1.PodPending).obj(),
		makePod(t, "ml", "bypass").wholeContainer("main", 1).node("gpu-w").obj(),
	}
}
