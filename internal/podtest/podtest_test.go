package podtest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

func TestBoundIsAPendingPodOfTheNodeCreatedAgeSecondsAfterEpoch(t *testing.T) {
	p := Bound("n1", "a", 3).GPU("c", 2).Obj()
	if p.Namespace != "ns" || p.UID != "uid-a" || p.Spec.NodeName != "n1" || p.Status.Phase != corev1.PodPending ||
		!p.CreationTimestamp.Time.Equal(Epoch.Add(3*time.Second)) {
		t.Errorf("Bound = %s/%s uid %s node %s phase %s created %v", p.Namespace, p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, p.CreationTimestamp)
	}
}

func TestAssignWritesTheRecordTheProgramsWouldWrite(t *testing.T) {
	p := Make("ns", "p").GPU("a", 4).Container("sidecar").Whole("w", 2).GPU("b", 6).
		AssignWholeOn("n1", api.PhaseAssigned, []int{0, 1}, []int{2, 3}).Obj()
	got, err := api.DefaultNames().AssignmentFromPod(p)
	if err != nil {
		t.Fatal(err)
	}
	want := api.Assignment{
		Version: api.AssignmentVersion, PodUID: "uid-ns-p", Node: "n1", Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{
			{Name: "a", CardUUID: "GPU-n1-0", CardIndex: 0, Units: 4},
			{Name: "b", CardUUID: "GPU-n1-1", CardIndex: 1, Units: 6},
		},
		WholeCards: []api.WholeCardAssignment{{Name: "w", CardUUIDs: []string{"GPU-n1-2", "GPU-n1-3"}, CardIndexes: []int{2, 3}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestEditAssignmentKeepsTheEditedRecord(t *testing.T) {
	p := Make("ns", "p").GPU("c", 4).AssignOn("n1", api.PhaseAllocated, 1).
		EditAssignment(func(a *api.Assignment) { a.Containers[0].Units = 20 }).Obj()
	a, err := api.DecodeAssignment(p.Annotations[api.DefaultNames().AnnotationAssignment()])
	if err != nil || a.Containers[0].Units != 20 {
		t.Errorf("edited record = %+v, %v; want 20 units", a, err)
	}
}

func TestObjIsACopyWithTheImageFilledIn(t *testing.T) {
	b := Make("ns", "p").GPU("c", 1).Image("pause")
	p := b.Obj()
	p.Spec.Containers[0].Name = "changed"
	if got := b.Obj().Spec.Containers[0]; got.Name != "c" || got.Image != "pause" {
		t.Errorf("second Obj container = %s image %q, want c with image pause", got.Name, got.Image)
	}
}

func TestAssignPanicsWhenTheCardsDoNotMatchTheContainers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Assign with two cards for one container did not panic")
		}
	}()
	Make("ns", "p").GPU("c", 1).AssignOn("n1", api.PhaseAssigned, 0, 1)
}
