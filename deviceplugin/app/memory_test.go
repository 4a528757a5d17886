package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/deviceplugin/usage"
)

func memoryOptions(t *testing.T, args ...string) Options {
	t.Helper()
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(append([]string{"--node-name=n"}, args...)); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestMemoryFlags(t *testing.T) {
	o := memoryOptions(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	m := o.Memory
	if m.Enforcement != "evict" || m.Tolerance != "5%" || m.Grace != 30*time.Second || m.SampleInterval != 5*time.Second || m.MPS || m.MetricsAddress != "" {
		t.Errorf("defaults = %+v", m)
	}
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--memory-enforcement=delete"}, wantErr: "use off, report, evict or kill"},
		{args: []string{"--memory-sample-interval=0"}, wantErr: "needs memory sampling"},
		{args: []string{"--memory-sample-interval=0", "--memory-enforcement=off"}},
		{args: []string{"--memory-sample-interval=-1s"}, wantErr: "want 0 (off) or a positive duration"},
		{args: []string{"--memory-tolerance=lots"}, wantErr: "memory.tolerance"},
		{args: []string{"--memory-tolerance=512Mi", "--memory-enforcement=kill"}},
		{args: []string{"--memory-grace=-5s"}, wantErr: "memory.grace"},
		{args: []string{"--metrics-address=9402"}, wantErr: "want host:port or :port"},
		{args: []string{"--metrics-address=:9402"}},
		{args: []string{"--mps", "--mps-pipe-dir=mps"}, wantErr: "absolute host path"},
		{args: []string{"--mps"}},
	}
	for _, tt := range tests {
		err := memoryOptions(t, tt.args...).Validate()
		if tt.wantErr == "" && err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%v: err = %v, want it to contain %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestMetricsEndpointServesUsage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := prometheus.NewRegistry()
	m, err := usage.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": "n"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	m.Set(usage.Sample{Cards: []usage.CardSample{{UUID: "GPU-0", TotalBytes: 1 << 30}}})
	var serving atomic.Bool
	ready := pluginReadiness(func() (bool, []string) {
		if serving.Load() {
			return true, nil
		}
		return false, []string{"example.com/gpu-mem"}
	}, func() bool { return false }, time.Minute, clock.RealClock{})
	addr, err := serveMetrics(ctx, "127.0.0.1:0", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ready, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if want := `gpushare_card_gpu_memory_total_bytes{card_index="0",card_uuid="GPU-0",node="n"} 1.073741824e+09`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
	for _, tc := range []struct {
		serving bool
		code    int
		body    string
	}{{false, http.StatusServiceUnavailable, "no ListAndWatch stream open for example.com/gpu-mem"}, {true, http.StatusOK, "ok"}} {
		serving.Store(tc.serving)
		r, err := http.Get("http://" + addr.String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if r.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("/readyz while serving=%v: %d %q, want %d with %q", tc.serving, r.StatusCode, b, tc.code, tc.body)
		}
	}
	if _, err := serveMetrics(ctx, addr.String(), http.NotFoundHandler(), nil, ktesting.NewLogger(t, ktesting.NewConfig())); err == nil || !strings.Contains(err.Error(), "--metrics-address") {
		t.Errorf("second listener on %s: err = %v, want one naming the flag", addr, err)
	}
}

// A plugin that starts while another pod's plugin serves the node (a rolling update's surge pod)
// is Ready only a call's longest duration after the kubelet moved to it, so that the DaemonSet
// controller stops the old pod with no call in flight there; one that starts alone is Ready as
// soon as it serves, and neither holds again when the kubelet restarts.
func TestReadinessHoldsWhileThePreviousPluginFinishesItsCalls(t *testing.T) {
	const hold = 15 * time.Second
	type look struct {
		step    time.Duration
		serving bool
		ready   bool
		why     string
	}
	for _, tc := range []struct {
		name     string
		previous bool
		looks    []look
	}{
		{"beside a previous plugin: ready a hold after the streams opened", true, []look{
			{0, false, false, "not serving the kubelet yet: no ListAndWatch stream open for example.com/gpu-mem"},
			{time.Second, true, false, "handing over: the kubelet moved to this plugin 0s ago; the previous instance finishes its calls (Ready 15s after the move)"},
			{hold - time.Second, true, false, "handing over: the kubelet moved to this plugin 14s ago"},
			{time.Second, true, true, ""},
			{time.Second, false, false, "not serving the kubelet yet"},
			{time.Second, true, true, ""},
		}},
		{"alone on the node: ready as soon as it serves", false, []look{
			{0, false, false, "not serving the kubelet yet"},
			{time.Second, true, true, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
			var serving atomic.Bool
			asked := 0
			ready := pluginReadiness(func() (bool, []string) {
				if serving.Load() {
					return true, nil
				}
				return false, []string{"example.com/gpu-mem"}
			}, func() bool { asked++; return tc.previous }, hold, clk)
			for i, l := range tc.looks {
				clk.SetTime(clk.Now().Add(l.step))
				serving.Store(l.serving)
				if ok, why := ready(); ok != l.ready || !strings.HasPrefix(why, l.why) {
					t.Errorf("look %d (serving %v): ready %v %q, want %v %q", i, l.serving, ok, why, l.ready, l.why)
				}
			}
			if asked != 1 {
				t.Errorf("asked %d times whether another pod's plugin serves the node, want once (when the streams first open)", asked)
			}
		})
	}
}
