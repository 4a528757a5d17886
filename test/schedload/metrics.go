package schedload

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Metric names the gpushare extender serves on /metrics (scheduler/server and
// client_golang's process collector).
const (
	MetricRequestDuration = "gpushare_extender_request_duration_seconds"
	MetricBinds           = "gpushare_extender_binds_total"
	MetricNodeDecisions   = "gpushare_extender_node_decisions_total"
	MetricCardCapacity    = "gpushare_card_capacity_units"
	MetricProcessCPU      = "process_cpu_seconds_total"
)

// Metrics is one scrape of a Prometheus text endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// Counters returns the counter family name's values by the given label's
// value (empty when the family is absent).
func (m Metrics) Counters(name, label string) map[string]float64 {
	out := map[string]float64{}
	if f := m[name]; f != nil {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// Scrape reads url (e.g. http://127.0.0.1:39999/metrics).
func Scrape(ctx context.Context, url string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return Metrics(fams), nil
}

// Value is the value of the first sample of a counter or gauge family whose
// labels include the given name=value pairs (none: the first sample).
func (m Metrics) Value(family string, labels ...string) (float64, bool) {
	f := m[family]
	if f == nil {
		return 0, false
	}
	for _, s := range f.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.GetCounter() != nil:
			return s.GetCounter().GetValue(), true
		case s.GetGauge() != nil:
			return s.GetGauge().GetValue(), true
		case s.GetUntyped() != nil:
			return s.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// Count is how many samples the family has (e.g. one per card for
// gpushare_card_capacity_units) whose labels include the given pairs.
func (m Metrics) Count(family string, labels ...string) int {
	n := 0
	if f := m[family]; f != nil {
		for _, s := range f.GetMetric() {
			if hasLabels(s, labels) {
				n++
			}
		}
	}
	return n
}

// CountPrefix is how many samples of the family have a label whose value
// starts with prefix (e.g. the cards of a Fleet: node=<Prefix>-...).
func (m Metrics) CountPrefix(family, label, prefix string) int {
	n := 0
	if f := m[family]; f != nil {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && strings.HasPrefix(l.GetValue(), prefix) {
					n++
				}
			}
		}
	}
	return n
}

func hasLabels(s *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Latency is a histogram's summary: how many observations and some
// quantiles, in seconds.
type Latency struct {
	Count         uint64
	P50, P90, P99 float64
	// Top is the histogram's largest finite bucket bound: a quantile equal
	// to it means "at least Top" (the observation was in the +Inf bucket).
	Top float64
}

// Histogram summarizes the histogram sample of the family whose labels
// include the given pairs (e.g. verb=bind); ok is false when there is none.
func (m Metrics) Histogram(family string, labels ...string) (Latency, bool) {
	f := m[family]
	if f == nil {
		return Latency{}, false
	}
	for _, s := range f.GetMetric() {
		h := s.GetHistogram()
		if h == nil || !hasLabels(s, labels) {
			continue
		}
		bs := make([]bucket, 0, len(h.GetBucket()))
		top := 0.0
		for _, b := range h.GetBucket() {
			bs = append(bs, bucket{upper: b.GetUpperBound(), count: b.GetCumulativeCount()})
			if !math.IsInf(b.GetUpperBound(), 1) {
				top = max(top, b.GetUpperBound())
			}
		}
		return Latency{
			Count: h.GetSampleCount(), Top: top,
			P50: quantile(0.50, bs, h.GetSampleCount()),
			P90: quantile(0.90, bs, h.GetSampleCount()),
			P99: quantile(0.99, bs, h.GetSampleCount()),
		}, true
	}
	return Latency{}, false
}

// bucket is a cumulative histogram bucket.
type bucket struct {
	upper float64
	count uint64
}

// quantile estimates the q-quantile from cumulative buckets the way
// Prometheus's histogram_quantile does: find the bucket the rank falls in and
// interpolate linearly inside it (from 0 for the first bucket). A rank beyond
// the last finite bucket gives that bucket's upper bound.
//
// Worked example: buckets ≤0.01: 50, ≤0.025: 90, ≤0.05: 100 (cumulative),
// total 100. p50 is rank 50, in the first bucket at its top: 0.01. p90 is rank
// 90: the top of the second, 0.025. p99 is rank 99, 9 of the third bucket's
// 10: 0.025 + (0.05-0.025)·9/10 = 0.0475.
func quantile(q float64, buckets []bucket, total uint64) float64 {
	if total == 0 || len(buckets) == 0 {
		return math.NaN()
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].upper < buckets[j].upper })
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	lastFinite := 0.0
	for _, b := range buckets {
		if math.IsInf(b.upper, 1) {
			break
		}
		lastFinite = b.upper
		if float64(b.count) >= rank {
			in := b.count - below
			if in == 0 {
				return b.upper
			}
			return lower + (b.upper-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b.upper, b.count
	}
	return lastFinite
}

// WaitCards polls the extender's metrics until its cache holds want cards on
// nodes whose names start with prefix (gpushare_card_capacity_units), so that
// a burst does not start before the extender has seen the nodes.
func WaitCards(ctx context.Context, metricsURL, prefix string, want int, timeout time.Duration) error {
	seen := -1
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		m, err := Scrape(ctx, metricsURL)
		if err != nil {
			return false, nil
		}
		seen = m.CountPrefix(MetricCardCapacity, "node", prefix)
		return seen >= want, nil
	})
	if err != nil {
		return fmt.Errorf("the extender's cache holds %d of the %d cards of nodes %s* after %v: %w", seen, want, prefix, timeout, err)
	}
	return nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPUSeconds is the CPU time (user + system) the process has used so
// far, from /proc/PID/stat.
func ProcessCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// After ")": state(3) ppid(4) … utime(14) stime(15): indexes 11 and 12.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return float64(utime+stime) / clockTicks, nil
}

// ProcessPeakRSS is the most resident memory the process has had (VmHWM,
// its high-water mark), in bytes, from /proc/PID/status.
func ProcessPeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return peakRSS(string(b))
}

// peakRSS reads VmHWM ("VmHWM:   123456 kB") from a /proc/PID/status text.
func peakRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("/proc/PID/status: no VmHWM in kB")
}
