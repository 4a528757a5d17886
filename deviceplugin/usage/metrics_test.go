package usage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMetricsExportTheSample(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Set(Sample{Time: t0,
		Cards: []CardSample{
			{UUID: "GPU-0", Index: 0, TotalBytes: 80 * gib, UsedBytes: 16 * gib, UnaccountedBytes: 4 * gib},
			{UUID: "GPU-1", Index: 1, TotalBytes: 80 * gib, Err: errors.New("lost")},
		},
		Usages: []Usage{
			{Card: "GPU-0", Ref: podA, Grant: true, GrantedBytes: 10 * gib, UsedBytes: 12 * gib},
			{Card: "GPU-0", Ref: podC, UsedBytes: 3 * gib},
			{Card: "GPU-0", Ref: Ref{}, UsedBytes: gib},
		},
	})
	m.Count(Outcome{Action: "evict", Result: "refused"})
	want := `
# HELP gpushare_card_gpu_memory_sample_ok 1 when NVML listed the card's processes at the last sweep, 0 when it failed.
# TYPE gpushare_card_gpu_memory_sample_ok gauge
gpushare_card_gpu_memory_sample_ok{card_index="0",card_uuid="GPU-0"} 1
gpushare_card_gpu_memory_sample_ok{card_index="1",card_uuid="GPU-1"} 0
# HELP gpushare_card_gpu_memory_total_bytes A card's GPU memory.
# TYPE gpushare_card_gpu_memory_total_bytes gauge
gpushare_card_gpu_memory_total_bytes{card_index="0",card_uuid="GPU-0"} 8.589934592e+10
gpushare_card_gpu_memory_total_bytes{card_index="1",card_uuid="GPU-1"} 8.589934592e+10
# HELP gpushare_card_gpu_memory_unaccounted_bytes GPU memory on a card held by processes without a grant on it (other pods, host processes).
# TYPE gpushare_card_gpu_memory_unaccounted_bytes gauge
gpushare_card_gpu_memory_unaccounted_bytes{card_index="0",card_uuid="GPU-0"} 4.294967296e+09
# HELP gpushare_card_gpu_memory_used_bytes GPU memory held by the processes on a card (sum of NVML's per-process figures).
# TYPE gpushare_card_gpu_memory_used_bytes gauge
gpushare_card_gpu_memory_used_bytes{card_index="0",card_uuid="GPU-0"} 1.7179869184e+10
# HELP gpushare_container_gpu_memory_granted_bytes GPU memory granted to a container on a card (its units of the configured resource, --resource-name).
# TYPE gpushare_container_gpu_memory_granted_bytes gauge
gpushare_container_gpu_memory_granted_bytes{card_uuid="GPU-0",container="train",namespace="ns",pod="a"} 1.073741824e+10
# HELP gpushare_gpu_memory_enforcement_actions_total Enforcement actions on containers over their GPU memory grant, by action (report, evict, kill) and result (done, refused: an eviction a disruption budget refused, followed by a kill; error).
# TYPE gpushare_gpu_memory_enforcement_actions_total counter
gpushare_gpu_memory_enforcement_actions_total{action="evict",result="refused"} 1
`
	names := []string{MetricCardSampleOK, MetricCardTotal, MetricCardUnaccounted, MetricCardUsed, MetricContainerGranted, MetricActions}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Used per container: the granted one and the one without a grant; the
	// host process only in the card's unaccounted figure.
	if n := testutil.CollectAndCount(m, MetricContainerUsed); n != 2 {
		t.Errorf("%d %s series, want 2", n, MetricContainerUsed)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpushare_container_gpu_memory_used_bytes GPU memory a container's processes hold on a card (NVML, per process, summed). Containers without a grant on the card are listed too; processes in no pod only count in gpushare_card_gpu_memory_unaccounted_bytes.
# TYPE gpushare_container_gpu_memory_used_bytes gauge
gpushare_container_gpu_memory_used_bytes{card_uuid="GPU-0",container="nogrant",namespace="ns",pod="c"} 3.221225472e+09
gpushare_container_gpu_memory_used_bytes{card_uuid="GPU-0",container="train",namespace="ns",pod="a"} 1.2884901888e+10
`), MetricContainerUsed); err != nil {
		t.Error(err)
	}
}

func TestLoopPublishesUsedAtMostOncePerPeriod(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "c")
	n.grant(a, "c", 0, 4)
	n.run(1, a, 0, 0, 3*gib+1) // 3 GiB and a byte: rounded up to a MiB
	clk := clocktesting.NewFakeClock(t0)
	s := n.sampler()
	s.Clock = clk.Now
	var published []map[string]int64
	l := &Loop{Sampler: s, Interval: 5 * time.Second, PublishEvery: time.Minute, Clock: clk, Log: klog.Background(),
		Publish: func(u map[string]int64) { published = append(published, u) }}
	for i := 0; i < 13; i++ { // 0 s … 60 s
		l.Once(context.Background())
		clk.Step(5 * time.Second)
	}
	if len(published) != 2 {
		t.Fatalf("published %d times in 60 s at a 1 min period, want 2 (at 0 s and 60 s)", len(published))
	}
	if got := published[0]["GPU-0"]; got != 3*1024+1 {
		t.Errorf("used = %d MiB, want 3073 (rounded up)", got)
	}
}
