package burstbench

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/test/schedload"
)

// A burst's pods are deleted gracefully, so that the next burst does not
// start beside their teardown on the node (a pod given no grace leaves the
// API at once, while its kubelet is still stopping its containers and
// holding its devices); the caller's adaptation comes last.
func TestBurstPodsLeaveOnlyOnceTheirNodeStoppedThem(t *testing.T) {
	o := DefaultOptions()
	p := o.pod(schedload.Burst{Namespace: "ns", Prefix: "gpu", Units: 3}, 7)
	if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g != TeardownGrace || TeardownGrace < 1 {
		t.Errorf("grace period %s, want %d s", ptrString(g), TeardownGrace)
	}
	o.Pod = func(p *corev1.Pod) { p.Spec.HostNetwork = true }
	if p := o.pod(schedload.Burst{Namespace: "ns", Prefix: "plain"}, 0); p.Name != "plain-00000" || !p.Spec.HostNetwork {
		t.Errorf("pod %s, host network %v: want plain-00000 adapted by Options.Pod", p.Name, p.Spec.HostNetwork)
	}
}

func ptrString(g *int64) string {
	if g == nil {
		return "unset"
	}
	return fmt.Sprintf("%d s", *g)
}
