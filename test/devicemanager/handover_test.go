package devicemanager

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// TestRollingUpdateAnswersTheAdmissionInFlight is a DaemonSet rolling update with maxSurge 1 as
// the chart runs it, against the real device manager: plugin a serves; an admission reaches it
// while its pod cache is behind the API server (the pod's watch event is held back), so the
// call waits in a; plugin b starts beside a (its own socket) and reports ready on /readyz, the
// probe the DaemonSet controller waits for; then a is told to stop, as the controller does.
// b holds its readiness for the longest call of its own configuration: a's allocate wait is
// longer (an operator raised it with the upgrade), so the call outlasts b's hold and the drain
// must answer it. The admission must succeed (a answers it before closing), a must not close
// before it has, and the node's allocatable units must never drop during the hand-over.
func TestRollingUpdateAnswersTheAdmissionInFlight(t *testing.T) {
	if reason := os.Getenv(envSkip); reason != "" {
		t.Skip(reason)
	}
	freshKubeletDir(t)
	src, err := nvml.ParseSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	sim := nvml.NewSimulator(node, src.GPUs...)
	late := pod("late", 1, []int64{2}, []card{{sim.UUID(0), 0}})
	next := pod("next", 2, []int64{2}, []card{{sim.UUID(1), 1}})
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	release := holdPodEvents(client, "late")

	k := startKubelet(t, nil)
	defer func() { _ = k.m.Stop(klog.Background()) }()
	stopA := startPlugin(t, client, "--pod-resources-socket=", "--allocate-wait=40s", "--instance=a")
	defer stopA()
	k.waitCapacity(t, 16)

	if _, err := client.CoreV1().Pods("default").Create(context.Background(), late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lists := podLists(client)
	admitted := make(chan error, 1)
	go func() { admitted <- k.admit(late) }()
	// a asks the API server whether its cache is behind when the pod is not in it: the call is in a.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return podLists(client) > lists, nil
	}); err != nil {
		t.Fatal("the admission never reached plugin a (no look at the API server's pods)")
	}

	addr := freeAddress(t)
	stopB := startPlugin(t, client, "--pod-resources-socket=", "--allocate-wait=1s", "--instance=b", "--metrics-address="+addr)
	defer stopB()
	waitReady(t, addr)
	select {
	case err := <-admitted:
		t.Fatalf("the admission ended (%v) before b was ready: nothing was in flight in a when it was told to stop", err)
	default:
	}

	lowest := watchAllocatable(k)
	stopped := make(chan time.Time, 1)
	go func() { stopA(); stopped <- time.Now() }()
	time.Sleep(500 * time.Millisecond) // a is stopping with the admission in flight
	released := time.Now()
	close(release)
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatalf("the admission in flight when plugin a was told to stop failed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the admission in flight when plugin a was told to stop never ended")
	}
	if at := <-stopped; at.Before(released) {
		t.Errorf("plugin a closed %v before the admission it was answering could end", released.Sub(at))
	}
	waitRecord(t, client, "late", api.PhaseAllocated)

	// b serves the node alone now, with every unit allocatable all along.
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.admit(next); err != nil {
		t.Fatalf("admission after the hand-over: %v", err)
	}
	waitRecord(t, client, "next", api.PhaseAllocated)
	if low := lowest(); low != 16 {
		t.Errorf("the node's allocatable %s dropped to %d during the hand-over, want 16 throughout", api.DefaultNames().ResourceName(), low)
	}
}

// holdPodEvents makes every pod watch of client deliver nothing from the first event of pod
// name on until release is closed: a pod cache behind the API server.
func holdPodEvents(client *fake.Clientset, name string) (release chan struct{}) {
	release = make(chan struct{})
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	client.PrependWatchReactor("pods", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(gvr, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		ch := make(chan watch.Event)
		out := watch.NewProxyWatcher(ch)
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && p.Name == name {
					select {
					case <-release:
					case <-out.StopChan():
						return
					}
				}
				select {
				case ch <- ev:
				case <-out.StopChan():
					return
				}
			}
		}()
		return true, out, nil
	})
	return release
}

// podLists counts the pod lists client has answered.
func podLists(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// waitReady waits for the plugin's /readyz at addr to answer 200 (the kubelet streams from it).
func waitReady(t *testing.T, addr string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("plugin b never ready on %s/readyz: %s", addr, last)
	}
}

// watchAllocatable samples the device manager's allocatable units every millisecond until
// lowest is called, which returns the lowest seen.
func watchAllocatable(k *kubelet) (lowest func() int64) {
	var low atomic.Int64
	low.Store(1 << 62)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_, a, _ := k.m.GetCapacity(klog.Background())
			q := a[api.DefaultNames().ResourceName()]
			if v := q.Value(); v < low.Load() {
				low.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		return low.Load()
	}
}
