package schedload

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
)

// PollInterval is how often the waits look.
const PollInterval = 100 * time.Millisecond

// Burst is a set of identical one-container pods that each ask for Units of
// gpu-mem (0: no GPU request at all).
type Burst struct {
	Namespace string
	// Prefix names the pods: Prefix-00000, ...
	Prefix string
	Pods   int
	Units  int64
	// Resource is what Units are of (default: gpu-mem).
	Resource corev1.ResourceName
	// SchedulerName is the profile that schedules them ("gpushare-scheduler"
	// for the project's configuration, "default-scheduler" for a plain
	// kube-scheduler).
	SchedulerName string
}

// Pod is pod i of the burst.
func (b Burst) Pod(i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", b.Prefix, i), Namespace: b.Namespace},
		Spec: corev1.PodSpec{
			SchedulerName:                 b.SchedulerName,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if b.Units > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
			cmp.Or(b.Resource, api.DefaultNames().ResourceName()): *resource.NewQuantity(b.Units, resource.DecimalSI),
		}
	}
	return p
}

// CreatePods creates the burst's pods at once, clients creations in flight
// at any moment, and returns how long the creations took. The
// client should not be rate-limited (rest.Config QPS < 0), or the burst is
// the client's, not the cluster's.
func CreatePods(ctx context.Context, client kubernetes.Interface, b Burst, clients int) (time.Duration, error) {
	start := time.Now()
	err := ForEach(ctx, b.Pods, clients, func(ctx context.Context, i int) error {
		if _, err := client.CoreV1().Pods(b.Namespace).Create(ctx, b.Pod(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %d of %d: %w", i, b.Pods, err)
		}
		return nil
	})
	return time.Since(start), err
}

// NewNamespace creates a namespace named generateName-<random> and waits
// (up to timeout) until its default ServiceAccount exists, without which the
// API server refuses pods.
func NewNamespace(ctx context.Context, client kubernetes.Interface, generateName string, timeout time.Duration) (string, error) {
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: generateName + "-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return ns.Name, fmt.Errorf("namespace %s has no default ServiceAccount after %v (is kube-controller-manager running?): %w", ns.Name, timeout, err)
	}
	return ns.Name, nil
}

// DeletePods deletes every pod of the namespace at once (grace period 0:
// no kubelet runs them) and waits until none is left, up to timeout.
func DeletePods(ctx context.Context, client kubernetes.Interface, ns string, grace *int64, timeout time.Duration) error {
	err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: grace}, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("delete the pods of %s: %w", ns, err)
	}
	left := -1
	err = wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		left = len(l.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d pods of %s still there after %v: %w", left, ns, timeout, err)
	}
	return nil
}

// DeleteNamespace deletes the namespace (pods first, waiting until they are
// gone, so that the next burst starts on an empty cluster). grace is the
// pods' deletion grace period: 0 removes them from the API at once (nodes
// without a kubelet); nil, their own, so that each is gone only once its
// kubelet has stopped its containers and released their devices.
func DeleteNamespace(ctx context.Context, client kubernetes.Interface, ns string, grace *int64, timeout time.Duration) error {
	perr := DeletePods(ctx, client, ns, grace, timeout)
	err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		err = fmt.Errorf("delete namespace %s: %w", ns, err)
	} else {
		err = nil
	}
	if perr != nil {
		return perr
	}
	return err
}

// BindRecorder watches a namespace's pods and records when it first saw each
// bound (spec.nodeName set): the client-side view of scheduling throughput.
type BindRecorder struct {
	mu     sync.Mutex
	bound  map[string]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// RecordBinds starts a pod informer on the namespace and returns once it has
// synced. Stop it with Stop.
func RecordBinds(ctx context.Context, client kubernetes.Interface, ns string) (*BindRecorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &BindRecorder{bound: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	see := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			now := time.Now()
			r.mu.Lock()
			if _, seen := r.bound[p.Name]; !seen {
				r.bound[p.Name] = now
			}
			r.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    see,
		UpdateFunc: func(_, obj any) { see(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		close(r.done)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		r.Stop()
		return nil, fmt.Errorf("pod informer for namespace %s did not sync", ns)
	}
	return r, nil
}

// Stop stops the informer.
func (r *BindRecorder) Stop() {
	r.cancel()
	<-r.done
}

// Bound is how many pods were seen bound so far.
func (r *BindRecorder) Bound() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bound)
}

// Times are the moments the pods were first seen bound, in order.
func (r *BindRecorder) Times() []time.Time {
	r.mu.Lock()
	ts := make([]time.Time, 0, len(r.bound))
	for _, t := range r.bound {
		ts = append(ts, t)
	}
	r.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

// StalledError says that not every pod was bound in time.
type StalledError struct {
	Bound, Want int
	After       time.Duration
	// LastBind is when the last pod was seen bound (since the wait began;
	// zero when none was).
	LastBind time.Duration
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("stalled: %d of %d bound after %v (last bind at %v)", e.Bound, e.Want, e.After.Round(time.Second), e.LastBind.Round(100*time.Millisecond))
}

// WaitBound waits until want pods were seen bound, at most timeout counted
// from since; it returns a *StalledError when they were not.
func (r *BindRecorder) WaitBound(ctx context.Context, want int, since time.Time, timeout time.Duration) error {
	left := time.Until(since.Add(timeout))
	err := wait.PollUntilContextTimeout(ctx, PollInterval, max(left, PollInterval), true, func(context.Context) (bool, error) {
		return r.Bound() >= want, nil
	})
	if err == nil {
		return nil
	}
	e := &StalledError{Bound: r.Bound(), Want: want, After: time.Since(since)}
	if ts := r.Times(); len(ts) > 0 {
		e.LastBind = ts[len(ts)-1].Sub(since)
	}
	return e
}

// Throughput is what the bind times say about a burst.
type Throughput struct {
	// Bound is how many pods were bound; Want how many were created.
	Bound, Want int
	// Elapsed is from the first creation to the last bind.
	Elapsed time.Duration
	// Overall is Want / Elapsed, in pods per second (zero when not all were
	// bound: a stalled run has no overall rate).
	Overall float64
	// Steady is the rate between the 10% and the 90% bind, pods per second
	// (zero when fewer than 90% were bound).
	Steady float64
}

// MeasureThroughput computes the burst's throughput from the bind times
// (BindRecorder.Times) and the moment the first pod was created.
//
// Worked example: 2,000 pods, first created at 0 s, the 200th bound at
// 3.0 s, the 1,800th at 21.0 s and the last at 24.0 s: Overall = 2000 / 24 =
// 83.3 pods/s, Steady = 1600 / 18 = 88.9 pods/s.
func MeasureThroughput(start time.Time, times []time.Time, want int) Throughput {
	th := Throughput{Bound: len(times), Want: want}
	if len(times) == 0 {
		return th
	}
	th.Elapsed = times[len(times)-1].Sub(start)
	if len(times) >= want && th.Elapsed > 0 {
		th.Overall = float64(want) / th.Elapsed.Seconds()
	}
	lo, hi := want/10, want*9/10
	if lo > 0 && hi > lo && len(times) >= hi {
		if d := times[hi-1].Sub(times[lo-1]); d > 0 {
			th.Steady = float64(hi-lo) / d.Seconds()
		}
	}
	return th
}

// BoundBy is how many of the bind times fall within d of start: a point of
// the progress curve ("294 bound in the first 15 s").
func BoundBy(start time.Time, times []time.Time, d time.Duration) int {
	return sort.Search(len(times), func(i int) bool { return times[i].Sub(start) > d })
}
