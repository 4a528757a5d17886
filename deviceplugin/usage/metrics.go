package usage

import (
	"cmp"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, exported so that a test can check every name the chart's
// dashboard and alerts query.
const (
	MetricContainerUsed    = "gpushare_container_gpu_memory_used_bytes"
	MetricContainerGranted = "gpushare_container_gpu_memory_granted_bytes"
	MetricCardUsed         = "gpushare_card_gpu_memory_used_bytes"
	MetricCardTotal        = "gpushare_card_gpu_memory_total_bytes"
	MetricCardUnaccounted  = "gpushare_card_gpu_memory_unaccounted_bytes"
	MetricCardSampleOK     = "gpushare_card_gpu_memory_sample_ok"
	MetricActions          = "gpushare_gpu_memory_enforcement_actions_total"
	MetricSweepSeconds     = "gpushare_gpu_memory_sweep_duration_seconds"
)

var (
	containerLabels = []string{"namespace", "pod", "container", "card_uuid"}
	cardLabels      = []string{"card_uuid", "card_index"}

	containerUsedDesc = prometheus.NewDesc(MetricContainerUsed,
		"GPU memory a container's processes hold on a card (NVML, per process, summed). Containers without a grant on the card are listed too; processes in no pod only count in "+MetricCardUnaccounted+".",
		containerLabels, nil)
	containerGrantedDesc = prometheus.NewDesc(MetricContainerGranted,
		"GPU memory granted to a container on a card (its units of the configured resource, --resource-name).", containerLabels, nil)
	cardUsedDesc = prometheus.NewDesc(MetricCardUsed,
		"GPU memory held by the processes on a card (sum of NVML's per-process figures).", cardLabels, nil)
	cardTotalDesc       = prometheus.NewDesc(MetricCardTotal, "A card's GPU memory.", cardLabels, nil)
	cardUnaccountedDesc = prometheus.NewDesc(MetricCardUnaccounted,
		"GPU memory on a card held by processes without a grant on it (other pods, host processes).", cardLabels, nil)
	cardSampleOKDesc = prometheus.NewDesc(MetricCardSampleOK,
		"1 when NVML listed the card's processes at the last sweep, 0 when it failed.", cardLabels, nil)
)

// Metrics exports the latest sample and counts enforcement actions. Register
// it on a prometheus.Registerer (the plugin wraps it with a node label).
type Metrics struct {
	mu     sync.Mutex
	sample Sample

	actions *prometheus.CounterVec
	sweep   prometheus.Histogram
}

// NewMetrics builds and registers the metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricActions,
			Help: "Enforcement actions on containers over their GPU memory grant, by action (report, evict, kill) and result (done, refused: an eviction a disruption budget refused, followed by a kill; error).",
		}, []string{"action", "result"}),
		sweep: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricSweepSeconds,
			Help:    "Time one memory sweep took (NVML process lists, /proc reads, attribution).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
	}
	for _, c := range []prometheus.Collector{m, m.actions, m.sweep} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Set makes s the sample exported.
func (m *Metrics) Set(s Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sample = s
}

// Count counts an enforcement outcome (Enforcer.Count).
func (m *Metrics) Count(o Outcome) { m.actions.WithLabelValues(o.Action, o.Result).Inc() }

// ObserveSweep records a sweep's duration in seconds.
func (m *Metrics) ObserveSweep(seconds float64) { m.sweep.Observe(seconds) }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{containerUsedDesc, containerGrantedDesc, cardUsedDesc, cardTotalDesc, cardUnaccountedDesc, cardSampleOKDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	s := m.sample
	m.mu.Unlock()
	for _, c := range s.Cards {
		idx := strconv.Itoa(c.Index)
		ch <- prometheus.MustNewConstMetric(cardTotalDesc, prometheus.GaugeValue, float64(c.TotalBytes), c.UUID, idx)
		if c.Err != nil {
			ch <- prometheus.MustNewConstMetric(cardSampleOKDesc, prometheus.GaugeValue, 0, c.UUID, idx)
			continue
		}
		ch <- prometheus.MustNewConstMetric(cardSampleOKDesc, prometheus.GaugeValue, 1, c.UUID, idx)
		ch <- prometheus.MustNewConstMetric(cardUsedDesc, prometheus.GaugeValue, float64(c.UsedBytes), c.UUID, idx)
		ch <- prometheus.MustNewConstMetric(cardUnaccountedDesc, prometheus.GaugeValue, float64(c.UnaccountedBytes), c.UUID, idx)
	}
	seen := map[[4]string]bool{}
	for _, u := range s.Usages {
		if !u.Ref.InPod() {
			continue
		}
		pod, container := u.Ref.Pod, u.Ref.Container
		pod = cmp.Or(pod, "uid:"+string(u.Ref.UID))
		l := [4]string{u.Ref.Namespace, pod, container, u.Card}
		if seen[l] {
			continue // two unnamed groups of one pod cannot occur; guard the registry anyway
		}
		seen[l] = true
		ch <- prometheus.MustNewConstMetric(containerUsedDesc, prometheus.GaugeValue, float64(u.UsedBytes), l[:]...)
		if u.Grant {
			ch <- prometheus.MustNewConstMetric(containerGrantedDesc, prometheus.GaugeValue, float64(u.GrantedBytes), l[:]...)
		}
	}
}
