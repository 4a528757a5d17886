package api

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHoldsUnitsAndMayStartContainers(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name     string
		pod      *corev1.Pod
		holds    bool
		mayStart bool
	}{
		{name: "no pod", pod: nil},
		{name: "pending", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, holds: true, mayStart: true},
		{name: "no phase yet", pod: &corev1.Pod{}, holds: true, mayStart: true},
		{name: "running", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, holds: true, mayStart: true},
		{name: "unknown", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodUnknown}}, holds: true, mayStart: true},
		{name: "succeeded", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}},
		{name: "failed", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}},
		{
			name:  "terminating but running still holds",
			pod:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			holds: true,
		},
		{
			name: "terminating and finished holds nothing",
			pod:  &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HoldsUnits(tt.pod); got != tt.holds {
				t.Errorf("HoldsUnits = %v, want %v", got, tt.holds)
			}
			if got := MayStartContainers(tt.pod); got != tt.mayStart {
				t.Errorf("MayStartContainers = %v, want %v", got, tt.mayStart)
			}
		})
	}
}

func TestRecordHoldsAllocatedOrAdmittedRecordsOfPodsThatHoldUnits(t *testing.T) {
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pending := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}
	done := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	for _, tt := range []struct {
		name  string
		pod   *corev1.Pod
		phase AssignmentPhase
		want  bool
	}{
		{"allocated, running", running, PhaseAllocated, true},
		{"assigned, not admitted: the extender's plan", pending, PhaseAssigned, false},
		{"allocated, not yet shown admitted", pending, PhaseAllocated, true},
		{"assigned, admitted: its containers start once the record names their cards", running, PhaseAssigned, true},
		{"allocated, finished", done, PhaseAllocated, false},
	} {
		if got := RecordHolds(tt.pod, Assignment{Phase: tt.phase}); got != tt.want {
			t.Errorf("%s: RecordHolds = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// BoundAt is the PodScheduled=True transition of a pod with a node, and
// nothing for a pod not bound, bound without the condition, or whose
// condition says it is not scheduled.
func TestBoundAt(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 26, 20, 0, 1, 0, time.UTC))
	pod := func(node string, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: conds}}
	}
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at.Add(time.Minute))}
	if got, ok := BoundAt(pod("n", ready, scheduled)); !ok || !got.Equal(at.Time) {
		t.Errorf("bound pod: BoundAt = %v, %v; want %v, true", got, ok, at)
	}
	for name, p := range map[string]*corev1.Pod{
		"no node":          pod("", scheduled),
		"no condition":     pod("n", ready),
		"not scheduled":    pod("n", corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, LastTransitionTime: at}),
		"no transition at": pod("n", corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}),
	} {
		if got, ok := BoundAt(p); ok {
			t.Errorf("%s: BoundAt = %v, true; want false", name, got)
		}
	}
}
