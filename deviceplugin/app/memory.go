package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/httpserve"
)

// MemoryOptions are the memory sampling, enforcement, metrics and MPS
// settings (docs/deviceplugin.md, "Memory").
type MemoryOptions struct {
	// SampleInterval is how often GPU memory in use is sampled per process and container
	// (metrics, inventory, enforcement); 0: never (no usage metrics, no enforcement).
	SampleInterval time.Duration `json:"sampleInterval"`
	// Enforcement is what happens to a container over its grant (by more than tolerance for
	// longer than grace): off, report (a Warning Event on the pod only), evict (the Eviction
	// API with a termination grace of at most evictGrace; when a PodDisruptionBudget refuses,
	// or the container still holds the memory after that grace, SIGKILL to its processes on
	// the card) or kill (SIGKILL to its processes on the card).
	Enforcement string `json:"enforcement"`
	// Tolerance is how far past its grant a container may go: a percentage of the grant (5%)
	// or a quantity (512Mi).
	Tolerance string `json:"tolerance"`
	// Grace is how long a container must stay over its grant before it is acted on.
	Grace time.Duration `json:"grace"`
	// EvictGrace is, with enforcement evict, the longest termination grace an eviction grants
	// (whole seconds); a container still holding the memory this long plus two sample
	// intervals after the eviction has its processes on the card killed.
	EvictGrace time.Duration `json:"evictGrace"`
	// ProcRoot is the host's /proc, to map GPU processes to pods (the plugin needs hostPID).
	ProcRoot string `json:"procRoot"`
	// MPS sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT to each container's grant and mounts the MPS
	// pipe and shm directories (the node must run nvidia-cuda-mps-control).
	MPS bool `json:"mps"`
	// MPSPipeDir is the host directory of the MPS control daemon's pipes, with mps.
	MPSPipeDir string `json:"mpsPipeDir"`
	// MPSShmDir is the host directory mounted at /dev/shm for MPS clients, with mps.
	MPSShmDir      string `json:"mpsShmDir"`
	MetricsAddress string `json:"-"`
	SimProcesses   string `json:"-"`
}

func (o Options) validateMemory() error {
	m := o.Memory
	if m.SampleInterval < 0 {
		return fmt.Errorf("memory.sampleInterval %v: want 0 (off) or a positive duration, e.g. 5s", m.SampleInterval)
	}
	mode, err := usage.ParseMode(m.Enforcement)
	if err != nil {
		return fmt.Errorf("memory.enforcement: %w", err)
	}
	if mode != usage.ModeOff && m.SampleInterval == 0 {
		return fmt.Errorf("memory.enforcement %s needs memory sampling: set memory.sampleInterval (e.g. 5s) or memory.enforcement: off", mode)
	}
	if _, err := usage.ParseTolerance(m.Tolerance); err != nil {
		return fmt.Errorf("memory.tolerance: %w", err)
	}
	if m.Grace < 0 {
		return fmt.Errorf("memory.grace %v: want 0 or a positive duration, e.g. 30s", m.Grace)
	}
	if m.EvictGrace < 0 || m.EvictGrace%time.Second != 0 {
		return fmt.Errorf("memory.evictGrace %v: want whole seconds, 0 or more, e.g. 30s", m.EvictGrace)
	}
	if m.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(m.MetricsAddress); err != nil {
			return fmt.Errorf("--metrics-address=%q: want host:port or :port, e.g. :9402 (empty: no endpoint)", m.MetricsAddress)
		}
	}
	if err := o.AdminAuth.Validate(); err != nil {
		return err
	}
	return m.mps().Validate()
}

// policy is the enforcement policy: a container still over its grant two
// sample intervals past the eviction's grace is killed (the kubelet had the
// grace to stop it; a sample to see it gone).
func (m MemoryOptions) policy(tol usage.Tolerance) usage.Policy {
	return usage.Policy{Tolerance: tol, Grace: m.Grace, KillAfter: m.EvictGrace + 2*m.SampleInterval}
}

func (m MemoryOptions) mps() response.MPS {
	return response.MPS{Enabled: m.MPS, PipeDir: m.MPSPipeDir, ShmDir: m.MPSShmDir}
}

// agent is what Run built for the node: its options and names, GPUs (with the simulator behind
// them when --nvml is simulated), card store, view of the cluster, record keys, client and
// metrics registry.
type agent struct {
	o      Options
	names  api.Names
	gpus   nvml.Interface
	sim    *nvml.Simulator
	store  *inventory.Store
	cl     *cluster.Cluster
	keys   api.RecordKeyring
	client kubernetes.Interface
	reg    *prometheus.Registry
}

// startMemory starts the metrics endpoint (stopped with ctx) and returns the memory sampler
// (with its enforcer) per the options, a node duty (nil when sampling is off): it runs in the
// one process of the node that holds the node lock (runNodeDuties).
// claims, when set, are the grants of containers given memory through ResourceClaims (a node
// served by DRA).
func startMemory(ctx context.Context, n agent, podres podresources.Reader, claims func(context.Context, []*corev1.Pod) ([]usage.Grant, error), ready readiness) (duty, error) {
	log := klog.FromContext(ctx).WithName("memory")
	o, m, store, client, reg := n.o, n.o.Memory, n.store, n.client, n.reg
	if sim := n.sim; sim != nil && m.SimProcesses != "" {
		sim.ReadProcessesFrom(m.SimProcesses)
	}
	var metrics *usage.Metrics
	if m.SampleInterval > 0 {
		var err error
		if metrics, err = usage.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"node": o.NodeName}, reg)); err != nil {
			return nil, err
		}
	}
	if m.MetricsAddress != "" {
		guard, err := adminauth.New(o.AdminAuth, client)
		if err != nil {
			return nil, err
		}
		if _, err := serveMetrics(ctx, m.MetricsAddress, guard.Wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), ready, log); err != nil {
			return nil, err
		}
	}
	if m.SampleInterval == 0 {
		log.Info("GPU memory sampling is off (memory.sampleInterval 0): no usage metrics, no enforcement")
		return nil, nil
	}
	mode, _ := usage.ParseMode(m.Enforcement)
	tol, _ := usage.ParseTolerance(m.Tolerance)
	clk := clock.RealClock{}
	loop := &usage.Loop{
		Sampler: &usage.Sampler{
			NVML: n.gpus, Cards: store.Cards, Unit: store.Unit(), Names: n.names, Proc: m.ProcRoot,
			Pods: n.cl.Pods, PodResources: podres, Claims: claims, Keys: n.keys, Clock: clk.Now,
		},
		Enforcer: &usage.Enforcer{
			Mode: mode, Policy: m.policy(tol), Log: log, Count: metrics.Count,
			Actions: usage.KubeActions{Client: client, Node: o.NodeName, Proc: m.ProcRoot, Signal: usage.SignalKill, Now: clk.Now, EvictGrace: m.EvictGrace, Labels: map[string]string{n.names.LabelDevicePlugin(): api.SanitizeLabelValue(o.NodeName)}},
		},
		Metrics:      metrics,
		Interval:     m.SampleInterval,
		Publish:      func(used map[string]int64) { store.SetUsed(used) },
		PublishEvery: time.Minute,
		Clock:        clk,
		Log:          log,
	}
	return func(ctx context.Context) {
		log.Info("GPU memory sampling", "interval", m.SampleInterval, "enforcement", mode, "tolerance", tol.String(), "grace", m.Grace, "evictGrace", m.EvictGrace, "mps", m.MPS)
		loop.Run(ctx)
	}, nil
}

// readiness says whether the node agent serves the kubelet, and if not, what it lacks.
type readiness func() (bool, string)

// pluginReadiness is the device plugin's readiness: a ListAndWatch stream open for each of its
// resources (plugin.Serving) and, if another pod's plugin served the node when this one first
// found them open (previous: a rolling update's old pod), hold more. The kubelet (v1.37.2
// devicemanager: PluginConnected sets m.endpoints[resource] before ListAndWatch opens; each call
// reads it as it starts) sends the old plugin no call after that, and each it sent ends within
// hold (plugin.CallLimit): the DaemonSet controller stops it once this one is Ready, with nothing
// in flight. Alone on the node (first install, reboot) or after a kubelet restart: no hold.
func pluginReadiness(serving func() (bool, []string), previous func() bool, hold time.Duration, clk clock.PassiveClock) readiness {
	var once sync.Once
	var moved, ready time.Time
	return func() (bool, string) {
		if ok, missing := serving(); !ok {
			return false, "not serving the kubelet yet: no ListAndWatch stream open for " + strings.Join(missing, ", ")
		}
		once.Do(func() {
			if moved, ready = clk.Now(), clk.Now(); previous() {
				ready = moved.Add(hold)
			}
		})
		if clk.Now().Before(ready) {
			return false, fmt.Sprintf("handing over: the kubelet moved to this plugin %v ago; the previous instance finishes its calls (Ready %v after the move)", clk.Since(moved).Round(time.Second), hold)
		}
		return true, ""
	}
}

// readyz answers 200 "ok" while ready says so, else 503 with what the node agent lacks.
func readyz(ready readiness) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}

// serveMetrics listens on addr (failing now if it cannot) and serves
// /metrics with h (the registry's handler, guarded) and /readyz for ready (open: the kubelet's
// probe carries no token) until ctx is done. It returns the address listened on.
func serveMetrics(ctx context.Context, addr string, h http.Handler, ready readiness, log klog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address=%s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if ready != nil {
		mux.Handle("/readyz", readyz(ready))
	}
	srv := httpserve.New(ctx, mux)
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Metrics endpoint stopped", "address", addr)
		}
	}()
	log.Info("Serving metrics", "address", ln.Addr().String(), "path", "/metrics")
	return ln.Addr(), nil
}
