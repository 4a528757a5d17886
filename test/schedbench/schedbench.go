// Package schedbench is gpushare's scheduling-throughput benchmark (`make
// bench-scheduling`, docs/design.md "Scheduling throughput"): on a local
// control plane (test/cluster) with N GPU nodes that exist only as API objects
// (test/schedload), it creates P gpu-mem pods at once from many clients and
// measures how fast they are bound, (a) by kube-scheduler alone and (b) by
// kube-scheduler with the gpushare extender and the project's configuration,
// once per policy; then it checks every pod is bound, with a valid record in
// (b), and no card or node over capacity.
package schedbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/schedload"
)

// Options configure a benchmark.
type Options struct {
	// Nodes, Cards per node and CardGiB: the fleet (default 1,000 × 8 × 80).
	Nodes, Cards int
	CardGiB      int64
	// Pods of PodGiB each, created by Clients concurrent creations (default
	// 2,000 × 8 GiB, 32).
	Pods    int
	PodGiB  int64
	Clients int
	// Policies run through the extender, in order (default all five).
	Policies []string
	// Plain runs kube-scheduler alone first, with its defaults (its adaptive
	// sample of the nodes): the reference for the ratio, the kube-scheduler
	// an operator runs.
	Plain bool
	// PlainAllNodes runs kube-scheduler alone a second time scoring every
	// node (percentageOfNodesToScore: 100, as the AllNodes extender runs
	// do), reported as "kube-scheduler-all-nodes" with its own ratio column.
	PlainAllNodes bool
	// SchedulerQPS is kube-scheduler's API client budget (clientConnection.qps,
	// burst twice that) in every run, plain and with the extender, so that the
	// ratio compares scheduling, not client budgets: with kube-scheduler's
	// default (50) the plain run binds at most ~50 pods/s while the extender
	// binds through its own client (default 1000; 0: kube-scheduler's default).
	SchedulerQPS int
	// Timeout bounds each run, from the first pod created to the last bound;
	// a run that has not bound every pod by then is reported stalled.
	Timeout time.Duration
	// ExtenderBinary is the built gpushare-scheduler. Required for policies.
	ExtenderBinary string
	// BaselineBinary, when set, is another gpushare-scheduler (e.g. built
	// from the commit before a change): each policy then runs first through
	// it (reported as "POLICY-before") and then through ExtenderBinary, in
	// the same invocation, against the same (a) and fleet.
	BaselineBinary string
	// ExtenderArgs are more extender flags (default: none, the shipped
	// defaults besides --policy).
	ExtenderArgs []string
	// SchedulerConfig is the KubeSchedulerConfiguration for (b) (default
	// the project's scheduler/config/kube-scheduler-config.yaml).
	SchedulerConfig string
	// AllNodes, when set, runs each policy a second time, after the others,
	// with kube-scheduler scoring every feasible node: SchedulerConfig with
	// percentageOfNodesToScore: 100 (reported as "POLICY-all-nodes"), so
	// that both settings are measured against the same (a) and fleet.
	AllNodes bool
	// StateDir is the control plane's state directory (default a new
	// temporary one, removed after a clean run unless Keep).
	StateDir string
	Keep     bool
	// Out receives the report; Log progress lines (both default stderr/stdout).
	Out io.Writer
	Log func(format string, args ...any)
}

// DefaultOptions are the figures: 1,000 nodes × 8 cards of 80 GiB,
// 2,000 pods of 8 GiB from 32 clients, every policy, 5 minutes per run.
func DefaultOptions() Options {
	return Options{
		Nodes: 1000, Cards: 8, CardGiB: 80, Pods: 2000, PodGiB: 8, Clients: 32,
		Policies: []string{"binpack", "spread", "bestfit", "fgd", "frag"},
		Plain:    true, PlainAllNodes: true, Timeout: 5 * time.Minute, SchedulerQPS: 1000,
	}
}

// Verbs are the extender verbs whose latency is reported.
var Verbs = []string{"filter", "prioritize", "bind"}

// CPUComponents are the processes whose CPU time is reported.
var CPUComponents = []string{"extender", "kube-scheduler", "kube-apiserver", "etcd"}

// Result is one run.
type Result struct {
	// Name is "kube-scheduler" for (a), the policy for (b).
	Name   string
	Policy string
	// Created is how long creating the pods took.
	Created    time.Duration
	Throughput schedload.Throughput
	// Progress is how many pods were bound within each of ProgressMarks.
	Progress []int
	// Stalled is set when not every pod was bound within the timeout.
	Stalled *schedload.StalledError
	// Latency per extender verb, and the bind outcomes, from the
	// extender's /metrics ((b) only).
	Latency map[string]schedload.Latency
	Binds   map[string]float64
	// Decisions are filter's and prioritize's node decisions by source
	// (evaluated, memo), from the extender's /metrics ((b) only).
	Decisions map[string]float64
	// CPU seconds per component (CPUComponents) during the run.
	CPU map[string]float64
	// ExtenderPeakRSS is the extender's most resident memory over its run
	// (it is started fresh for each run: the informers' initial lists and
	// the burst), in bytes ((b) only; 0 when unread).
	ExtenderPeakRSS int64
	// Check is what the checks afterwards found.
	Check schedload.Report
	// Err is an error that stopped the run.
	Err error
}

// OK reports whether the run finished and its checks passed.
func (r Result) OK() bool { return r.Err == nil && r.Stalled == nil && r.Check.OK() }

// ProgressMarks are the moments (after the first creation) at which the
// report shows how many pods were bound.
var ProgressMarks = []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second}

// Bench is a benchmark in progress: the control plane and the fleet.
type Bench struct {
	opts   Options
	c      *cluster.Cluster
	client kubernetes.Interface // not rate-limited
	fleet  schedload.Fleet
	port   int
	ext    *cluster.Process
	extLog string
	// NodesIn is how long creating the fleet took, ClusterIn starting the
	// control plane.
	NodesIn, ClusterIn time.Duration
}

// Run runs the benchmark: control plane, fleet, (a) then (b) per policy. It
// prints the report to opts.Out and returns the results; the error is set when
// the benchmark could not run at all or a run failed its checks.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "schedbench: "+f+"\n", a...) }
	}
	if o.Nodes <= 0 || o.Cards <= 0 || o.CardGiB <= 0 || o.Pods <= 0 || o.PodGiB <= 0 || o.Clients <= 0 || o.Timeout <= 0 {
		return nil, errors.New("nodes, cards, card GiB, pods, pod GiB, clients and timeout must be positive")
	}
	if len(o.Policies) > 0 && o.ExtenderBinary == "" {
		return nil, errors.New("policies to run but no extender binary (-extender)")
	}
	if o.SchedulerConfig == "" {
		o.SchedulerConfig = filepath.Join(cluster.RepoRoot(), cluster.SchedulerConfigFile)
	}
	tmp := o.StateDir == ""
	if tmp {
		dir, err := os.MkdirTemp("", "gpushare-schedbench-")
		if err != nil {
			return nil, err
		}
		o.StateDir = dir
	}
	b, err := start(ctx, o)
	if err != nil {
		o.Log("state and logs kept in %s", o.StateDir)
		return nil, err
	}
	results := b.runAll(ctx)
	stopErr := b.stop()
	printReport(o.Out, o, b, results)
	ok := stopErr == nil
	for _, r := range results {
		ok = ok && r.OK()
	}
	if ok && tmp && !o.Keep {
		_ = os.RemoveAll(o.StateDir)
	} else {
		fmt.Fprintf(o.Out, "\nstate and logs kept in %s\n", o.StateDir)
	}
	switch {
	case stopErr != nil:
		return results, stopErr
	case !ok:
		return results, errors.New("a run stalled or failed its checks (see the report)")
	}
	return results, nil
}

// start brings the control plane up (kube-scheduler with its defaults, the
// node lifecycle controller off: nothing heartbeats the API-object nodes, so
// it would turn them NotReady after ~50 s) and creates the fleet.
func start(ctx context.Context, o Options) (*Bench, error) {
	b := &Bench{opts: o, fleet: schedload.Fleet{Prefix: "bench-node", Nodes: o.Nodes, CardsPerNode: o.Cards, CardUnits: o.CardGiB}}
	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{StateDir: o.StateDir, KCMControllers: "*,-node-lifecycle-controller",
		SchedulerQPS: o.SchedulerQPS, SchedulerBurst: 2 * o.SchedulerQPS})
	if err != nil {
		return nil, err
	}
	b.c, b.ClusterIn = c, time.Since(t0)
	o.Log("control plane up in %v (state %s)", b.ClusterIn.Round(time.Millisecond), o.StateDir)
	cfg := *c.RESTConfig
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the burst is the cluster's to absorb
	if b.client, err = kubernetes.NewForConfig(&cfg); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if b.port, err = cluster.FreePort(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	t0 = time.Now()
	if err := schedload.CreateNodes(ctx, b.client, b.fleet, o.Clients); err != nil {
		_ = c.Stop()
		return nil, err
	}
	b.NodesIn = time.Since(t0)
	o.Log("%d nodes × %d cards of %d GiB created in %v", o.Nodes, o.Cards, o.CardGiB, b.NodesIn.Round(time.Millisecond))
	return b, nil
}

func (b *Bench) stop() error {
	var errs []error
	if b.ext != nil {
		errs = append(errs, b.ext.Stop())
	}
	errs = append(errs, b.c.Stop())
	return errors.Join(errs...)
}

func (b *Bench) runAll(ctx context.Context) []Result {
	var results []Result
	if b.opts.Plain {
		results = append(results, b.run(ctx, "", "default-scheduler", "", ""))
	}
	if b.opts.PlainAllNodes && ctx.Err() == nil {
		results = append(results, b.runPlainAllNodes(ctx))
	}
	if len(b.opts.Policies) == 0 {
		return results
	}
	name, err := cluster.SchedulerName(b.opts.SchedulerConfig)
	if err == nil {
		err = b.c.RestartSchedulerWith(ctx, b.opts.SchedulerConfig, fmt.Sprintf("http://127.0.0.1:%d", b.port))
	}
	if err != nil {
		return append(results, Result{Name: "extender", Err: err})
	}
	b.opts.Log("kube-scheduler restarted with %s (profile %q)", b.opts.SchedulerConfig, name)
	for _, p := range b.opts.Policies {
		if b.opts.BaselineBinary != "" && ctx.Err() == nil {
			results = append(results, b.run(ctx, p, name, b.opts.BaselineBinary, p+BaselineSuffix))
		}
		if ctx.Err() != nil {
			break
		}
		results = append(results, b.run(ctx, p, name, b.opts.ExtenderBinary, p))
	}
	if !b.opts.AllNodes || ctx.Err() != nil {
		return results
	}
	every := filepath.Join(b.opts.StateDir, "kube-scheduler-config-extender-all-nodes.yaml")
	err = WithNodesToScore(b.opts.SchedulerConfig, every, 100)
	if err == nil {
		err = b.c.RestartSchedulerWith(ctx, every, fmt.Sprintf("http://127.0.0.1:%d", b.port))
	}
	if err != nil {
		return append(results, Result{Name: "extender" + AllNodesSuffix, Err: err})
	}
	b.opts.Log("kube-scheduler restarted with %s (percentageOfNodesToScore: 100)", every)
	for _, p := range b.opts.Policies {
		if ctx.Err() != nil {
			break
		}
		results = append(results, b.run(ctx, p, name, b.opts.ExtenderBinary, p+AllNodesSuffix))
	}
	return results
}

// PlainAllNodes names the run of Options.PlainAllNodes.
const PlainAllNodes = "kube-scheduler-all-nodes"

// AllNodesConfig is kube-scheduler's default configuration but scoring
// every feasible node.
const AllNodesConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
`

// runPlainAllNodes runs kube-scheduler alone with AllNodesConfig.
func (b *Bench) runPlainAllNodes(ctx context.Context) Result {
	cfg := filepath.Join(b.opts.StateDir, "kube-scheduler-config-all-nodes.yaml")
	err := os.WriteFile(cfg, []byte(AllNodesConfig), 0o644)
	if err == nil {
		err = b.c.RestartSchedulerWith(ctx, cfg, "")
	}
	if err != nil {
		return Result{Name: PlainAllNodes, Err: err}
	}
	b.opts.Log("kube-scheduler restarted with %s (every node scored, no extender)", cfg)
	r := b.run(ctx, "", "default-scheduler", "", "")
	r.Name = PlainAllNodes
	return r
}

// AllNodesSuffix marks the runs of Options.AllNodes.
const AllNodesSuffix = "-all-nodes"

// WithNodesToScore writes the KubeSchedulerConfiguration in src to dst with
// its top-level percentageOfNodesToScore set to percent (100: every feasible
// node; 0: kube-scheduler's adaptive sample, 50 % − nodes/125, at least 5 %,
// at least 100 nodes), everything else unchanged. A src that already has
// that setting (unset counts as 0) is refused: the run would measure
// nothing new.
func WithNodesToScore(src, dst string, percent int) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	var have int
	if v, ok := cfg["percentageOfNodesToScore"].(float64); ok {
		have = int(v)
	}
	if have == percent {
		return fmt.Errorf("%s already has percentageOfNodesToScore %d", src, percent)
	}
	cfg["percentageOfNodesToScore"] = percent
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, out, 0o644)
}

// BaselineSuffix marks the runs of Options.BaselineBinary.
const BaselineSuffix = "-before"

// run is one burst: with policy "" through kube-scheduler alone, else
// through the extender binary started with that policy (and stopped
// afterwards), reported as name.
func (b *Bench) run(ctx context.Context, policy, schedulerName, binary, name string) Result {
	r := Result{Name: "kube-scheduler", Policy: policy, CPU: map[string]float64{}}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", b.port)
	if policy != "" {
		r.Name = name
		args := []string{"--policy", policy}
		if b.opts.SchedulerQPS > 0 {
			// The extender binds through its own client: the same budget as kube-scheduler's.
			args = append(args, fmt.Sprintf("--kube-api-qps=%d", b.opts.SchedulerQPS), fmt.Sprintf("--kube-api-burst=%d", 2*b.opts.SchedulerQPS))
		}
		args = append(args, b.opts.ExtenderArgs...)
		ext, err := b.c.StartExtender(ctx, binary, b.port, args...)
		if err != nil {
			r.Err = err
			return r
		}
		b.ext = ext
		defer func() {
			if err := ext.Stop(); err != nil && r.Err == nil {
				r.Err = fmt.Errorf("stopping the extender: %w", err)
			}
			b.ext = nil
		}()
		if err := schedload.WaitCards(ctx, metricsURL, b.fleet.Prefix+"-", b.fleet.Cards(), 2*time.Minute); err != nil {
			r.Err = err
			return r
		}
	}
	b.opts.Log("run %s: %d pods of %d GiB from %d clients", r.Name, b.opts.Pods, b.opts.PodGiB, b.opts.Clients)
	ns, err := schedload.NewNamespace(ctx, b.client, "bench-"+r.Name, time.Minute)
	if err != nil {
		r.Err = err
		return r
	}
	defer func() {
		if err := schedload.DeleteNamespace(context.WithoutCancel(ctx), b.client, ns, ptr.To[int64](0), 5*time.Minute); err != nil && r.Err == nil {
			r.Err = err
		}
	}()
	rec, err := schedload.RecordBinds(ctx, b.client, ns)
	if err != nil {
		r.Err = err
		return r
	}
	defer rec.Stop()

	pids := map[string]int{}
	for _, comp := range CPUComponents[1:] {
		if pid, err := b.c.PID(comp); err == nil {
			pids[comp] = pid
		}
	}
	if b.ext != nil {
		pids["extender"] = b.ext.PID()
	}
	cpu0 := cpuTimes(pids)

	burst := schedload.Burst{Namespace: ns, Prefix: "pod", Pods: b.opts.Pods, Units: b.opts.PodGiB, SchedulerName: schedulerName}
	start := time.Now()
	r.Created, err = schedload.CreatePods(ctx, b.client, burst, b.opts.Clients)
	if err != nil {
		r.Err = err
		return r
	}
	var stalled *schedload.StalledError
	if err := rec.WaitBound(ctx, b.opts.Pods, start, b.opts.Timeout); errors.As(err, &stalled) {
		r.Stalled = stalled
	} else if err != nil {
		r.Err = err
	}
	cpu1 := cpuTimes(pids)
	for comp := range pids {
		r.CPU[comp] = cpu1[comp] - cpu0[comp]
	}
	if pid, ok := pids["extender"]; ok {
		r.ExtenderPeakRSS, _ = schedload.ProcessPeakRSS(pid)
	}
	times := rec.Times()
	r.Throughput = schedload.MeasureThroughput(start, times, b.opts.Pods)
	for _, m := range ProgressMarks {
		r.Progress = append(r.Progress, schedload.BoundBy(start, times, m))
	}
	if policy != "" {
		if m, err := schedload.Scrape(ctx, metricsURL); err == nil {
			r.Latency = map[string]schedload.Latency{}
			for _, v := range Verbs {
				if l, ok := m.Histogram(schedload.MetricRequestDuration, "verb", v); ok {
					r.Latency[v] = l
				}
			}
			r.Binds = m.Counters(schedload.MetricBinds, "outcome")
			r.Decisions = m.Counters(schedload.MetricNodeDecisions, "source")
		}
		r.Check, err = schedload.CheckAssignments(ctx, b.client, ns)
	} else {
		r.Check, err = schedload.CheckBound(ctx, b.client, ns)
	}
	if err != nil && r.Err == nil {
		r.Err = err
	}
	b.opts.Log("run %s: %d of %d bound in %v", r.Name, r.Throughput.Bound, b.opts.Pods, r.Throughput.Elapsed.Round(time.Millisecond))
	return r
}

// cpuTimes reads each process's CPU seconds; a process that cannot be read
// is left out.
func cpuTimes(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for comp, pid := range pids {
		if s, err := schedload.ProcessCPUSeconds(pid); err == nil {
			out[comp] = s
		}
	}
	return out
}
