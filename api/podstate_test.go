package api

import (
	"testing"

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

func TestRecordHoldsOnlyAllocatedRecordsOfPodsThatHoldUnits(t *testing.T) {
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	done := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	for _, tt := range []struct {
		name  string
		pod   *corev1.Pod
		phase AssignmentPhase
		want  bool
	}{
		{"allocated, running", running, PhaseAllocated, true},
		{"assigned: the extender's plan", running, PhaseAssigned, false},
		{"allocated, finished", done, PhaseAllocated, false},
	} {
		if got := RecordHolds(tt.pod, Assignment{Phase: tt.phase}); got != tt.want {
			t.Errorf("%s: RecordHolds = %v, want %v", tt.name, got, tt.want)
		}
	}
}
