package burstbench

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A burst whose pods the scheduler cannot place (a policy the cluster does
// not allow, a full cluster) ends with the scheduler's reason once no pod
// has moved for StallTimeout, not at the burst's timeout; a pod bound
// meanwhile starts the count again.
func TestABurstThatStallsEndsWithTheSchedulersReason(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &watcher{pods: map[string]*Timeline{"a": {Kind: GPU}, "b": {Kind: GPU}}}
	pending := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: `0/3 nodes are available: policy "bestfit" is not allowed`,
		}}}}
	}
	if why := w.stalled(start.Add(time.Hour), start, StallTimeout); why != "" {
		t.Errorf("stalled with no pod unschedulable: %q", why)
	}
	w.observe(pending("a"), start.Add(time.Second))
	if why := w.stalled(start.Add(StallTimeout-time.Second), start, StallTimeout); why != "" {
		t.Errorf("stalled before StallTimeout: %q", why)
	}
	why := w.stalled(start.Add(StallTimeout), start, StallTimeout)
	if !strings.Contains(why, `a: 0/3 nodes are available: policy "bestfit" is not allowed`) || !strings.Contains(why, "1 unschedulable") {
		t.Errorf("stalled says %q; want the pod and the scheduler's message", why)
	}
	bound := pending("b")
	bound.Spec.NodeName = "n1"
	w.observe(bound, start.Add(StallTimeout))
	if why := w.stalled(start.Add(StallTimeout+time.Second), start, StallTimeout); why != "" {
		t.Errorf("stalled right after a pod was bound: %q", why)
	}
	// Unschedulable for a moment only: bound since, it is no reason to stop a slow tail.
	a := pending("a")
	a.Spec.NodeName = "n2"
	w.observe(a, start.Add(StallTimeout+time.Second))
	if why := w.stalled(start.Add(time.Hour), start, StallTimeout); why != "" {
		t.Errorf("stalled with every pod bound: %q", why)
	}
}
