package plugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names: where a GPU pod's time goes on its node, from its binding to
// its record.
const (
	// MetricAllocateSeconds is each Allocate call, by resource and result.
	MetricAllocateSeconds = "gpushare_device_plugin_allocate_seconds"
	// MetricAllocateWaitSeconds is the part of an Allocate from its first
	// look at the pod cache to its decision: the wait for a pod the kubelet
	// saw first (--allocate-wait), near 0 otherwise.
	MetricAllocateWaitSeconds = "gpushare_device_plugin_allocate_wait_seconds"
	// MetricPreferredSeconds is each GetPreferredAllocation call.
	MetricPreferredSeconds = "gpushare_device_plugin_preferred_allocation_seconds"
	// MetricBindToAllocateSeconds is, per container allocated, the time
	// from the pod's binding (api.BoundAt, one-second resolution) to the
	// Allocate that gave it its devices.
	MetricBindToAllocateSeconds = "gpushare_device_plugin_bind_to_allocate_seconds"
	// MetricRecordWriteSeconds is each write of a pod's record after an
	// Allocate (read, merge, patch, retries).
	MetricRecordWriteSeconds = "gpushare_device_plugin_record_write_seconds"
	// MetricPodResourcesGets is, per read of the kubelet's account of a
	// resource (an admission call, the reconciler, the usage sampler), the
	// PodResources Get calls it made: pods already complete are remembered,
	// so a read costs the pods being admitted, not every pod of the node.
	MetricPodResourcesGets = "gpushare_device_plugin_podresources_gets"
)

// Metrics times the device plugin's calls. A nil *Metrics records nothing.
type Metrics struct {
	allocate, wait, preferred, bindTo *prometheus.HistogramVec
	write                             prometheus.Histogram
	gets                              *prometheus.HistogramVec
}

// callBuckets: 1 ms to ~33 s; bindBuckets: 0.25 s to ~4 min.
var (
	callBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)
	bindBuckets = prometheus.ExponentialBuckets(0.25, 2, 11)
	getsBuckets = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128}
)

// NewMetrics builds the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		allocate: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricAllocateSeconds, Buckets: callBuckets,
			Help: "Time the device plugin took to answer an Allocate call, by resource and result (allocated, refused)."}, []string{"resource", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricAllocateWaitSeconds, Buckets: callBuckets,
			Help: "Time an Allocate took from its first look at the plugin's pod cache to its decision, by resource: the wait for a pod the kubelet saw first, near 0 otherwise."}, []string{"resource"}),
		preferred: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPreferredSeconds, Buckets: callBuckets,
			Help: "Time the device plugin took to answer a GetPreferredAllocation call, by resource."}, []string{"resource"}),
		bindTo: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricBindToAllocateSeconds, Buckets: bindBuckets,
			Help: "Per container given devices: time from its pod's binding (PodScheduled, one-second resolution) to that Allocate, by resource."}, []string{"resource"}),
		write: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricRecordWriteSeconds, Buckets: callBuckets,
			Help: "Time one write of a pod's assignment record took after an Allocate (read, merge, patch, retries)."}),
		gets: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPodResourcesGets, Buckets: getsBuckets,
			Help: "PodResources Get calls per read of the kubelet's account of a resource (admission calls, reconciler, usage sampler): the pods being admitted, not every pod of the node."}, []string{"resource"}),
	}
	for _, c := range []prometheus.Collector{m.allocate, m.wait, m.preferred, m.bindTo, m.write, m.gets} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observeAllocate(resource string, err error, took, waited time.Duration) {
	if m == nil {
		return
	}
	result := "allocated"
	if err != nil {
		result = "refused"
	}
	m.allocate.WithLabelValues(resource, result).Observe(took.Seconds())
	m.wait.WithLabelValues(resource).Observe(waited.Seconds())
}

func (m *Metrics) observePreferred(resource string, took time.Duration) {
	if m != nil {
		m.preferred.WithLabelValues(resource).Observe(took.Seconds())
	}
}

func (m *Metrics) observeBindToAllocate(resource string, d time.Duration) {
	if m != nil {
		m.bindTo.WithLabelValues(resource).Observe(max(d, 0).Seconds())
	}
}

func (m *Metrics) observeWrite(took time.Duration) {
	if m != nil {
		m.write.Observe(took.Seconds())
	}
}

// ObservePodResourcesGets returns the function a resource's
// podresources.Kubelet reports its Gets per read to (nil on a nil *Metrics).
func (m *Metrics) ObservePodResourcesGets(resource string) func(int) {
	if m == nil {
		return nil
	}
	h := m.gets.WithLabelValues(resource)
	return func(n int) { h.Observe(float64(n)) }
}
