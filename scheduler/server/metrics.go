package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// metrics are the server's Prometheus metrics, registered on an injected
// registry (never the global one).
type metrics struct {
	latency *prometheus.HistogramVec
	binds   *prometheus.CounterVec
	nodes   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, c Cache) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpushare_extender_request_duration_seconds",
			Help:    "Time to answer an extender verb (filter, prioritize, bind, preempt), including bind's wait for the API budget and its Binding.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"verb"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpushare_extender_binds_total",
			Help: "Bind verb calls by outcome: bound, no_fit, invalid, api_error, assume_error, throttled, cancelled, unknown.",
		}, []string{"outcome"}),
		nodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpushare_extender_node_decisions_total",
			Help: "Node decisions of filter and prioritize calls by source: evaluated (the policy ran), memo (the node's snapshot, the pod's request, the policy and the workload were those of a recent call: its decision was reused).",
		}, []string{"source"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.latency, m.binds, m.nodes, &cardCollector{cache: c}} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// evaluations counts a call's node decisions by source.
func (m *metrics) evaluations(evaluated, memo int) {
	m.nodes.WithLabelValues("evaluated").Add(float64(evaluated))
	m.nodes.WithLabelValues("memo").Add(float64(memo))
}

// observe records a verb call that began at start on clk.
func (m *metrics) observe(verb string, clk clock.PassiveClock, start time.Time) {
	m.latency.WithLabelValues(verb).Observe(clk.Since(start).Seconds())
}

var (
	cardCapacityDesc = prometheus.NewDesc("gpushare_card_capacity_units",
		"A card's capacity in its node's gpu-mem unit, whatever its state (see /inspect for the state).",
		[]string{"node", "card", "uuid"}, nil)
	cardUsedDesc = prometheus.NewDesc("gpushare_card_used_units",
		"Units of a card assigned to pods (assumed or confirmed); a card given whole counts its capacity.",
		[]string{"node", "card", "uuid"}, nil)
	cardWholeDesc = prometheus.NewDesc("gpushare_card_held_whole",
		"1 while a card is given whole (the whole-card resource, --whole-resource-name) to a pod, assumed or confirmed; 0 otherwise.",
		[]string{"node", "card", "uuid"}, nil)
)

// cardCollector reads per-card figures from the cache at scrape time, so a
// removed node or card leaves no stale series behind.
type cardCollector struct{ cache Cache }

func (cc *cardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cardCapacityDesc
	ch <- cardUsedDesc
	ch <- cardWholeDesc
}

func (cc *cardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range cc.cache.Nodes() {
		for _, c := range n.Cards {
			idx := strconv.Itoa(c.Index)
			ch <- prometheus.MustNewConstMetric(cardCapacityDesc, prometheus.GaugeValue, float64(c.Capacity), n.Name, idx, c.UUID)
			used, whole := c.Used, 0.0
			if c.Whole {
				used, whole = c.Capacity, 1
			}
			ch <- prometheus.MustNewConstMetric(cardUsedDesc, prometheus.GaugeValue, float64(used), n.Name, idx, c.UUID)
			ch <- prometheus.MustNewConstMetric(cardWholeDesc, prometheus.GaugeValue, whole, n.Name, idx, c.UUID)
		}
	}
}
