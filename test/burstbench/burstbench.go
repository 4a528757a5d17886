// Package burstbench measures time to a running pod in a burst (`make
// bench-burst`): on a running cluster (the playground by default), three
// bursts one after the other — pods without a GPU request alone, pods asking
// for GPU memory alone, and the two interleaved — each created at once; each
// pod's create → bound → Ready is taken from a watch (client-side,
// millisecond resolution). The target (Judge): every pod Ready, and each
// GPU or mixed p90 at most 1.2 times the p90 of pods without a request
// alone, the node's own pace.
package burstbench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/schedload"
)

// Options configure one burst.
type Options struct {
	// Pods per burst (default 100; the mixed burst half of each kind), GiB each GPU pod asks for (4),
	// concurrent creations (16).
	Pods    int
	GiB     int64
	Clients int
	// GPUScheduler is the GPU pods' schedulerName (the chart's profile,
	// "gpushare-scheduler"); PlainScheduler the others' (default:
	// "default-scheduler").
	GPUScheduler   string
	PlainScheduler string
	// Timeout bounds the wait for every pod to be Ready (default 5 min).
	Timeout time.Duration
	// Keep leaves the namespace and its pods (default: deleted).
	Keep bool
	// Mix is which kinds one Run creates (RunSuite sets it per burst).
	Mix Mix
	// Mixes, when set, are the bursts RunSuite runs (default: all three,
	// and DeviceFloor after the baseline when FloorResource is set).
	Mixes []Mix
	// FloorResource is the resource the DeviceFloor burst's pods ask GiB
	// of, served by ServeFloorPlugins (empty: no floor burst).
	FloorResource corev1.ResourceName
	// FloorWhat says what serves the floor's pods (default: a device plugin
	// that does nothing; the DRA variant: DRAFloor's driver).
	FloorWhat string
	// Pod, when set, adapts each pod before it is created (e.g. the image
	// and host network a real node's runtime needs).
	Pod func(*corev1.Pod)
	// Prepare, when set, runs in each burst's namespace before its pods
	// are created (e.g. the ResourceClaimTemplate DRA pods name).
	Prepare func(ctx context.Context, client kubernetes.Interface, namespace string) error
	Log     func(format string, args ...any)
	// Measure, when set, is called as a burst's first pod is created; the
	// function it returns when every pod is Ready or Failed (e.g. to take
	// the CPU time the cluster's processes spent on the burst).
	Measure func(Mix) func()
}

// DefaultOptions are the figures of the playground measurement: 100 pods
// a burst, 4 GiB, 16 clients.
func DefaultOptions() Options {
	return Options{Pods: 100, GiB: 4, Clients: 16, GPUScheduler: "gpushare-scheduler", Timeout: 5 * time.Minute}
}

// Kinds of pods in a burst.
const (
	Plain = "no GPU"
	GPU   = "GPU"
	// Floor pods ask for a device of a plugin that does nothing
	// (ServeFloorPlugins), through the default scheduler.
	Floor = "do-nothing device"
)

// Mix is which kinds of pods a burst creates.
type Mix int

// The bursts RunSuite runs, in its order.
const (
	Interleaved Mix = iota // both kinds, alternating: half the pods each
	PlainOnly              // pods without a GPU request alone
	GPUOnly                // GPU pods alone
	DeviceFloor            // pods asking a do-nothing device plugin, alone: not judged
)

func (m Mix) String() string {
	switch m {
	case PlainOnly:
		return "no-GPU alone"
	case GPUOnly:
		return "GPU alone"
	case DeviceFloor:
		return "device floor"
	}
	return "mixed"
}

// kinds are the pods a burst of mix creates, in creation order: kind and
// index within the kind. Every burst creates pods pods, the mixed one half
// of each kind, so that the three bursts load the nodes alike.
func (m Mix) kinds(pods int) (out []struct {
	kind string
	i    int
}) {
	add := func(kind string, i int) {
		out = append(out, struct {
			kind string
			i    int
		}{kind, i})
	}
	for i := range pods {
		switch m {
		case PlainOnly:
			add(Plain, i)
		case GPUOnly:
			add(GPU, i)
		case DeviceFloor:
			add(Floor, i)
		default:
			add([]string{Plain, GPU}[i%2], i/2)
		}
	}
	return out
}

// Timeline is one pod's times, client-side: created (its Create returned),
// first seen bound (spec.nodeName) and first seen Ready; zero when not
// (yet) seen. Failed is set when it was seen Failed.
type Timeline struct {
	Kind, Node            string
	Created, Bound, Ready time.Time
	Failed                bool
	FailedReason          string
	// Recorded: the pod carried the playground node agent's container
	// records (api.Names.AnnotationSimulatedContainers), a write a kubelet
	// does not make.
	Recorded bool
}

// Result is one burst of a suite.
type Result struct {
	Mix   Mix
	Pods  map[string]*Timeline
	Stats map[string]Stats
	Err   error
}

// RunSuite runs the three bursts one after the other, each in its own
// namespace, deleted before the next starts: pods without a GPU request
// alone, GPU pods alone, then both interleaved.
func RunSuite(ctx context.Context, client kubernetes.Interface, o Options) []Result {
	var out []Result
	mixes := o.Mixes
	if len(mixes) == 0 {
		mixes = []Mix{PlainOnly, GPUOnly, Interleaved}
		if o.FloorResource != "" {
			mixes = []Mix{PlainOnly, DeviceFloor, GPUOnly, Interleaved}
		}
	}
	for _, m := range mixes {
		o.Mix = m
		pods, err := Run(ctx, client, o)
		out = append(out, Result{Mix: m, Pods: pods, Stats: Summarize(pods), Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

// Run creates the burst in a new namespace, waits until every pod is Ready
// or Failed (or Timeout), and returns each pod's timeline by name.
func Run(ctx context.Context, client kubernetes.Interface, o Options) (map[string]*Timeline, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	ns, err := schedload.NewNamespace(ctx, client, "burst", time.Minute)
	if err != nil {
		return nil, err
	}
	if !o.Keep {
		defer func() {
			// Gracefully: the next burst starts once the nodes have stopped
			// this one's containers, not beside their teardown.
			if err := schedload.DeleteNamespace(context.WithoutCancel(ctx), client, ns, nil, 2*time.Minute); err != nil {
				o.Log("deleting namespace %s: %v", ns, err)
			}
		}()
	}
	plainScheduler := o.PlainScheduler
	if plainScheduler == "" {
		plainScheduler = corev1.DefaultSchedulerName
	}
	if (o.Mix == GPUOnly || o.Mix == Interleaved) && o.Prepare == nil {
		if err := fits(ctx, client, int64(o.Pods)*o.GiB); err != nil {
			return nil, err
		}
	}
	if o.Prepare != nil {
		if err := o.Prepare(ctx, client, ns); err != nil {
			return nil, fmt.Errorf("preparing namespace %s: %w", ns, err)
		}
	}
	bursts := map[string]schedload.Burst{
		Plain: {Namespace: ns, Prefix: "plain", Pods: o.Pods, SchedulerName: plainScheduler},
		GPU:   {Namespace: ns, Prefix: "gpu", Pods: o.Pods, Units: o.GiB, SchedulerName: o.GPUScheduler},
		Floor: {Namespace: ns, Prefix: "floor", Pods: o.Pods, Units: o.GiB, SchedulerName: plainScheduler, Resource: o.FloorResource},
	}
	order := o.Mix.kinds(o.Pods)
	w := &watcher{pods: map[string]*Timeline{}}
	for _, k := range order {
		w.pods[o.pod(bursts[k.kind], k.i).Name] = &Timeline{Kind: k.kind}
	}
	stop, err := w.start(ctx, client, ns)
	if err != nil {
		return nil, err
	}
	defer stop()
	if o.Measure != nil {
		end := o.Measure(o.Mix)
		defer end()
	}
	o.Log("namespace %s: %s burst, %d pods (%d GiB each GPU pod), %d created at a time", ns, o.Mix, len(order), o.GiB, o.Clients)
	err = schedload.ForEach(ctx, len(order), o.Clients, func(ctx context.Context, i int) error {
		p := o.pod(bursts[order[i].kind], order[i].i)
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s: %w", p.Name, err)
		}
		w.created(p.Name, time.Now())
		return nil
	})
	if err != nil {
		return w.snapshot(), err
	}
	start := time.Now()
	deadline := start.Add(o.Timeout)
	for !w.settled() {
		if time.Now().After(deadline) {
			return w.snapshot(), fmt.Errorf("not every pod Ready or Failed after %v", o.Timeout)
		}
		if why := w.stalled(time.Now(), start, StallTimeout); why != "" {
			return w.snapshot(), fmt.Errorf("not every pod Ready or Failed: %s", why)
		}
		select {
		case <-ctx.Done():
			return w.snapshot(), ctx.Err()
		case <-time.After(schedload.PollInterval):
		}
	}
	return w.snapshot(), nil
}

// TeardownGrace is the burst pods' termination grace period: deleted
// gracefully, a pod leaves the API once its kubelet has stopped its
// containers (pause stops at once) and released its devices and claims.
const TeardownGrace = 30

// pod is pod i of burst b as the burst creates it.
func (o Options) pod(b schedload.Burst, i int) *corev1.Pod {
	p := b.Pod(i)
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](TeardownGrace)
	if o.Pod != nil {
		o.Pod(p)
	}
	return p
}

// watcher records each pod's first bound and Ready from a pod informer.
type watcher struct {
	mu   sync.Mutex
	pods map[string]*Timeline
	// moved is when a pod was last seen bound, Ready or Failed for the first
	// time; unschedulable, the scheduler's message of each pod not bound.
	moved         time.Time
	unschedulable map[string]string
}

func (w *watcher) start(ctx context.Context, client kubernetes.Interface, ns string) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	observe := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			w.observe(p, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("pod informer of %s did not sync", ns)
	}
	return func() { cancel(); f.Shutdown() }, nil
}

func (w *watcher) created(name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.pods[name]; t != nil && t.Created.IsZero() {
		t.Created = at
	}
}

func (w *watcher) observe(p *corev1.Pod, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.pods[p.Name]
	if t == nil {
		return
	}
	if p.Spec.NodeName != "" && t.Bound.IsZero() {
		t.Bound, t.Node, w.moved = at, p.Spec.NodeName, at
	}
	if t.Ready.IsZero() && podutil.IsPodReady(p) {
		t.Ready, w.moved = at, at
	}
	delete(w.unschedulable, p.Name)
	if _, c := podutil.GetPodCondition(&p.Status, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && p.Spec.NodeName == "" {
		if w.unschedulable == nil {
			w.unschedulable = map[string]string{}
		}
		w.unschedulable[p.Name] = c.Message
	}
	if _, ok := p.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]; ok {
		t.Recorded = true
	}
	if p.Status.Phase == corev1.PodFailed && !t.Failed {
		t.Failed, t.FailedReason, w.moved = true, p.Status.Reason+": "+p.Status.Message, at
	}
}

// stalled says why the burst will not settle: no pod bound, Ready or Failed
// for stall (since start at the earliest) while a pod not bound is
// unschedulable; "" otherwise.
func (w *watcher) stalled(now, start time.Time, stall time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.unschedulable) == 0 || now.Sub(later(w.moved, start)) < stall {
		return ""
	}
	name := slices.Min(slices.Collect(maps.Keys(w.unschedulable)))
	return fmt.Sprintf("no pod bound, Ready or Failed for %v, and %d unschedulable: the scheduler says %s: %s", stall, len(w.unschedulable), name, w.unschedulable[name])
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// StallTimeout is how long a burst may make no progress while a pod is
// unschedulable before it ends with the scheduler's reason.
const StallTimeout = 30 * time.Second

func (w *watcher) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.pods {
		if t.Created.IsZero() || (t.Ready.IsZero() && !t.Failed) {
			return false
		}
	}
	return true
}

func (w *watcher) snapshot() map[string]*Timeline {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]*Timeline, len(w.pods))
	for n, t := range w.pods {
		c := *t
		out[n] = &c
	}
	return out
}

// fits refuses a burst whose GPU pods ask for more of the gpu-mem resource
// than the cluster's nodes have free by kube-scheduler's count (allocatable
// less the requests of the pods bound there): such a burst measures a full
// cluster, with pods that never bind, not time to Ready.
func fits(ctx context.Context, client kubernetes.Interface, want int64) error {
	res := api.DefaultNames().ResourceName()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	var free int64
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[res]
		free += q.Value()
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || !api.HoldsUnits(&p) {
			continue
		}
		for _, c := range api.KubeletDemand(&p, res) {
			free -= c.Units
		}
	}
	if want > free {
		return fmt.Errorf("the burst's GPU pods ask for %d of %s, and the cluster's nodes have %d free (allocatable less what bound pods request): lower -pods or -gib (PODS=, GIB=), or free GPU memory", want, res, free)
	}
	return nil
}
