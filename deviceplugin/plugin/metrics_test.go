package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// histogram is the sample count and sum of the histogram name with labels.
func histogram(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// Where a GPU pod's time goes on its node: each GetPreferredAllocation and
// Allocate is timed (by result), and a container given devices counts the
// time since its pod's binding (PodScheduled), here 30 s before.
func TestMetricsTimeEachCallAndThePodFromItsBinding(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	bound := metav1.NewTime(time.Now().Add(-30 * time.Second))
	h := newHarness(t, setup{cfg: Config{Metrics: m}, pods: func(c [2]podtest.Card) []*corev1.Pod {
		p := podtest.Bound(nodeName, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj()
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: bound}}
		return []*corev1.Pod{p}
	}})
	res := string(api.DefaultNames().ResourceName())
	avail := append(unitIDs(h.cards[0].UUID, 0, 8), unitIDs(h.cards[1].UUID, 0, 8)...)
	if _, err := h.dp.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 3}}}); err != nil {
		t.Fatal(err)
	}
	h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 3))
	if _, err := h.allocate(t, unitIDs(h.cards[0].UUID, 0, 5)); err == nil {
		t.Fatal("an Allocate of 5 units nobody asks for succeeded")
	}

	if n, _ := histogram(t, reg, MetricPreferredSeconds, map[string]string{"resource": res}); n != 1 {
		t.Errorf("%s: %d calls, want 1", MetricPreferredSeconds, n)
	}
	for result, want := range map[string]uint64{"allocated": 1, "refused": 1} {
		if n, _ := histogram(t, reg, MetricAllocateSeconds, map[string]string{"resource": res, "result": result}); n != want {
			t.Errorf("%s{result=%s}: %d calls, want %d", MetricAllocateSeconds, result, n, want)
		}
	}
	if n, _ := histogram(t, reg, MetricAllocateWaitSeconds, map[string]string{"resource": res}); n != 2 {
		t.Errorf("%s: %d calls, want 2", MetricAllocateWaitSeconds, n)
	}
	n, sum := histogram(t, reg, MetricBindToAllocateSeconds, map[string]string{"resource": res})
	if n != 1 || sum < 30 || sum > 60 {
		t.Errorf("%s: %d containers, %.1f s; want 1 container, 30 s after its binding (at most 60)", MetricBindToAllocateSeconds, n, sum)
	}
	// The record writer writes the allocated pod's record after Allocate
	// returned (recordQueue): once.
	deadline := time.Now().Add(10 * time.Second)
	n, _ = histogram(t, reg, MetricRecordWriteSeconds, nil)
	for ; n == 0 && time.Now().Before(deadline); n, _ = histogram(t, reg, MetricRecordWriteSeconds, nil) {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 1 {
		t.Errorf("%s: %d writes, want 1", MetricRecordWriteSeconds, n)
	}
}
