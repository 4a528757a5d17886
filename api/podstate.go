package api

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// HoldsUnits reports whether a pod still holds the units it was given (or,
// not yet bound, may still be given them), the rule every program uses:
// Succeeded or Failed holds nothing (the kubelet frees its devices); anything
// else holds them, terminating included (the kubelet keeps a pod's devices
// until its containers stopped; for a moment after, a card's records may hold
// both it and the next pod, the inspector's TerminatingOverlap: the safe side
// to err on) and Unknown included (the node stopped reporting, not the
// containers). Whether the units are on a node is a separate question.
func HoldsUnits(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// MayStartContainers reports whether the kubelet may still start (and so
// call Allocate for) containers of this pod: it holds its units and is not
// being deleted. The kubelet starts no container of a pod marked for
// deletion, so a terminating pod holds units but awaits none.
func MayStartContainers(pod *corev1.Pod) bool {
	return HoldsUnits(pod) && pod.DeletionTimestamp == nil
}

// Admitted reports whether the pod's status shows the kubelet admitted it:
// Running, or a container status written (the kubelet writes them only
// after admission). A pod not (yet) shown admitted may still be awaiting it.
func Admitted(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning || len(pod.Status.ContainerStatuses) > 0 || len(pod.Status.InitContainerStatuses) > 0
}

// BoundAt is when the pod was bound to its node: the last transition of its
// PodScheduled condition to True, which the API server sets when it takes
// the binding (one-second resolution). ok is false for a pod not bound, or
// bound without the condition (e.g. created with spec.nodeName).
func BoundAt(pod *corev1.Pod) (at time.Time, ok bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, pod.Spec.NodeName != ""
		}
	}
	return time.Time{}, false
}

// RecordHolds reports whether a pod's record shows it holding the cards it
// names: the pod holds its units and the record is Allocated, or the pod is
// admitted (a container starts only once its record names its card). An
// Assigned record of a pod not yet admitted is the extender's plan.
func RecordHolds(pod *corev1.Pod, a Assignment) bool {
	return HoldsUnits(pod) && (a.Phase == PhaseAllocated || Admitted(pod))
}

// HeldPhase is the phase to show for pod's record: Allocated once the record
// holds (RecordHolds: the device plugin leaves the record of an admitted pod
// Assigned when its cards are right), else the record's own.
func HeldPhase(pod *corev1.Pod, a Assignment) AssignmentPhase {
	if RecordHolds(pod, a) {
		return PhaseAllocated
	}
	return a.Phase
}
