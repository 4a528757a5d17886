package usage

import (
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestChartQueriesOnlyExportedMetrics reads the chart's Grafana dashboard and
// PrometheusRule and checks that every gpushare_* metric they query is one
// the device plugin exports (with the node label the plugin adds), so that a
// renamed metric cannot leave a dashboard panel or an alert silently empty.
func TestChartQueriesOnlyExportedMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": "n"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	m.Set(Sample{
		Cards:  []CardSample{{UUID: "GPU-0", TotalBytes: gib}, {UUID: "GPU-1", Index: 1, Err: errors.New("lost")}},
		Usages: []Usage{{Card: "GPU-0", Ref: podA, Grant: true, GrantedBytes: gib, UsedBytes: gib}},
	})
	m.Count(Outcome{Action: "report", Result: "done"})
	m.ObserveSweep(0.002)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+s] = true
			}
		}
		for _, mt := range f.GetMetric() {
			node := false
			for _, l := range mt.GetLabel() {
				node = node || l.GetName() == "node"
			}
			if !node {
				t.Errorf("%s has no node label (the dashboard and alerts select and join on it)", f.GetName())
			}
		}
	}
	name := regexp.MustCompile(`\bgpushare_[a-z0-9_]+`)
	for _, file := range []string{"../../charts/gpushare/dashboards/gpushare-memory.json", "../../charts/gpushare/templates/prometheusrule.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		queried := map[string]bool{}
		for _, n := range name.FindAllString(string(b), -1) {
			queried[n] = true
		}
		if len(queried) == 0 {
			t.Errorf("%s queries no gpushare metric: the pattern no longer finds them", file)
		}
		var missing []string
		for n := range queried {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s queries metrics the device plugin does not export: %s", file, strings.Join(missing, ", "))
		}
	}
}
