package devicemanager

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/app"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/podtest"
)

const (
	node     = "dm-node"
	spec     = "spec:2x8GiB:Test-GPU"
	envChild = "GPUSHARE_DEVICEMANAGER_TEST_CHILD"
)

// TestMain re-runs the test binary inside `unshare -m --propagation private`
// with a tmpfs on /var/lib, unless it already runs there.
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(m.Run())
	}
	if reason := cannotIsolate(); reason != "" {
		os.Setenv(envSkip, reason)
		os.Exit(m.Run())
	}
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	args := append([]string{"-m", "--propagation", "private", "sh", "-c", `mount -t tmpfs tmpfs /var/lib && exec "$0" "$@"`, self}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), envChild+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		panic(err)
	}
	os.Exit(0)
}

const envSkip = "GPUSHARE_DEVICEMANAGER_TEST_SKIP"

func cannotIsolate() string {
	if os.Geteuid() != 0 {
		return "not root: the kubelet device manager owns /var/lib/kubelet/device-plugins and must run in a private mount namespace (run as root: make test-devicemanager)"
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return "unshare(1) not found (util-linux): cannot make a private mount namespace for the kubelet device manager"
	}
	if err := exec.Command("unshare", "-m", "--propagation", "private", "true").Run(); err != nil {
		return "unshare -m failed (" + err.Error() + "): no private mount namespace possible here"
	}
	return ""
}

// freshKubeletDir empties /var/lib/kubelet (the private tmpfs TestMain
// mounted) so that each test, and each -count repetition, starts without the
// device manager's checkpoint of an earlier one: with it, the kubelet would
// treat pods with the same UIDs as already allocated and never call Allocate.
func freshKubeletDir(t *testing.T) {
	t.Helper()
	if os.Getenv(envChild) != "1" {
		t.Fatal("refusing to empty /var/lib/kubelet outside the test's private mount namespace")
	}
	if err := os.RemoveAll("/var/lib/kubelet"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/var/lib/kubelet/device-plugins", 0o755); err != nil {
		t.Fatal(err)
	}
}

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

// kubelet is the real device manager plus the pods it considers active.
type kubelet struct {
	m    *devicemanager.ManagerImpl
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (k *kubelet) activePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*corev1.Pod(nil), k.pods...)
}

func startKubelet(t *testing.T, pods []*corev1.Pod) *kubelet {
	t.Helper()
	m, err := devicemanager.NewManagerImpl(klog.Background(), nil, topologymanager.NewFakeManager(klog.Background()))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{m: m, pods: pods}
	if err := m.Start(klog.Background(), k.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatal(err)
	}
	return k
}

// admit runs the kubelet's device admission for every container of pod.
func (k *kubelet) admit(pod *corev1.Pod) error {
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	for i := range pod.Spec.Containers {
		if err := k.m.Allocate(context.Background(), pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
			return err
		}
	}
	return nil
}

// mountedCard is the card the runtime would expose: the volume-mounts entry.
func (k *kubelet) mountedCard(t *testing.T, pod *corev1.Pod, container string) string {
	t.Helper()
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name != container {
			continue
		}
		opts, err := k.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[i])
		if err != nil {
			t.Fatal(err)
		}
		if opts == nil {
			t.Fatalf("%s/%s: no device run options", pod.Name, container)
		}
		env := map[string]string{}
		for _, e := range opts.Envs {
			env[e.Name] = e.Value
		}
		if env[api.EnvNvidiaVisibleDevices] != api.VisibleDevicesVolumeRoot {
			t.Errorf("%s/%s: %s=%q", pod.Name, container, api.EnvNvidiaVisibleDevices, env[api.EnvNvidiaVisibleDevices])
		}
		var cards []string
		for _, m := range opts.Mounts {
			if strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/") && m.HostPath == "/dev/null" {
				cards = append(cards, strings.TrimPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/"))
			}
		}
		if len(cards) != 1 {
			t.Fatalf("%s/%s: mounts %v, want exactly one card", pod.Name, container, opts.Mounts)
		}
		return cards[0]
	}
	t.Fatalf("no container %s", container)
	return ""
}

// waitCapacity waits until the device manager counts want units of
// capacity, all of them allocatable: a plugin is registered and its
// ListAndWatch has reported every unit healthy.
func (k *kubelet) waitCapacity(t *testing.T, want int64) {
	t.Helper()
	k.waitResource(t, want, want)
}

// waitResource waits until the device manager reports capacity and
// allocatable units of the resource.
func (k *kubelet) waitResource(t *testing.T, capacity, allocatable int64) {
	t.Helper()
	var gotC, gotA int64
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		c, a, _ := k.m.GetCapacity(klog.Background())
		qc, qa := c[api.DefaultNames().ResourceName()], a[api.DefaultNames().ResourceName()]
		gotC, gotA = qc.Value(), qa.Value()
		return gotC == capacity && gotA == allocatable, nil
	})
	if err != nil {
		t.Fatalf("kubelet %s: capacity %d, allocatable %d; want %d and %d", api.DefaultNames().ResourceName(), gotC, gotA, capacity, allocatable)
	}
}

type card struct {
	uuid  string
	index int
}

// pod builds a Pending pod default/name bound to node, created age seconds
// after podtest.Epoch, with containers c0, c1, ... asking for units;
// assigned: one card per container, or nil for no record.
func pod(name string, age int, units []int64, assigned []card) *corev1.Pod {
	b := podtest.Make("default", name).UID("uid-" + name).Node(node).Phase(corev1.PodPending).Created(podtest.Epoch.Add(time.Duration(age) * time.Second))
	for i, u := range units {
		b.GPU("c"+string(rune('0'+i)), u)
	}
	if assigned != nil {
		var cards []podtest.Card
		for _, c := range assigned {
			cards = append(cards, podtest.Card{UUID: c.uuid, Index: c.index})
		}
		b.Assign(api.PhaseAssigned, cards...)
	}
	return b.Obj()
}

func TestPluginWithRealKubeletDeviceManager(t *testing.T) {
	if reason := os.Getenv(envSkip); reason != "" {
		t.Skip(reason)
	}
	freshKubeletDir(t)
	src, err := nvml.ParseSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	sim := nvml.NewSimulator(node, src.GPUs...) // the same stable UUIDs the plugin will see
	c0, c1 := card{sim.UUID(0), 0}, card{sim.UUID(1), 1}

	single := pod("single", 1, []int64{3}, []card{c1})
	multi := pod("multi", 2, []int64{2, 2}, []card{c0, c1})
	bypass := pod("bypass", 3, []int64{1}, nil)
	afterRestart := pod("after-restart", 4, []int64{4}, []card{c0})
	afterPluginRestart := pod("after-plugin-restart", 5, []int64{1}, []card{c1})
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, single, multi, bypass, afterRestart, afterPluginRestart)

	k := startKubelet(t, nil)
	defer func() { _ = k.m.Stop(klog.Background()) }()

	stop := startPlugin(t, client, "--pod-resources-socket=", "--allocate-wait=5s")
	defer func() { stop() }()

	k.waitCapacity(t, 16)

	if err := k.admit(single); err != nil {
		t.Fatalf("admit single: %v", err)
	}
	if got := k.mountedCard(t, single, "c0"); got != c1.uuid {
		t.Errorf("single got card %s, want its assigned card 1 (%s)", got, c1.uuid)
	}
	if err := k.admit(multi); err != nil {
		t.Fatalf("admit multi: %v", err)
	}
	if a, b := k.mountedCard(t, multi, "c0"), k.mountedCard(t, multi, "c1"); a != c0.uuid || b != c1.uuid {
		t.Errorf("multi got %s and %s, want card 0 then card 1", a, b)
	}
	err = k.admit(bypass)
	if err == nil || !strings.Contains(err.Error(), "pod default/bypass has no gpushare assignment: pods requesting example.com/gpu-mem must be scheduled by gpushare-scheduler") {
		t.Errorf("admit bypass: %v, want the plugin's refusal", err)
	}
	// What the kubelet does next (this test has no status writer): the pod fails.
	bypass.Status.Phase = corev1.PodFailed
	bypass.Status.Reason = "UnexpectedAdmissionError"
	if _, err := client.CoreV1().Pods("default").UpdateStatus(context.Background(), bypass, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"single", "multi"} {
		waitRecord(t, client, name, api.PhaseAllocated)
	}

	// The kubelet restarts: a new device manager wipes the directory and
	// re-creates kubelet.sock; the plugin must register again.
	if err := k.m.Stop(klog.Background()); err != nil {
		t.Fatal(err)
	}
	k = startKubelet(t, k.activePods()[:2]) // single and multi are still running
	k.waitCapacity(t, 16)
	if got := k.mountedCard(t, single, "c0"); got != c1.uuid {
		t.Errorf("after the restart single's container options name %s, want card 1 (from the kubelet's checkpoint)", got)
	}
	if err := k.admit(afterRestart); err != nil {
		t.Fatalf("admit after restart: %v", err)
	}
	if got := k.mountedCard(t, afterRestart, "c0"); got != c0.uuid {
		t.Errorf("after-restart got card %s, want card 0", got)
	}
	waitRecord(t, client, "after-restart", api.PhaseAllocated)

	// The plugin restarts (new process, empty memory) while the kubelet runs:
	// it registers again, the records of running pods stay as they are, and
	// the next pod is allocated as usual.
	before := records(t, client)
	stop()
	// The device manager learns that the plugin went away asynchronously
	// (its ListAndWatch client sees the stream end, then marks every unit
	// unhealthy). Until then it still shows 16 allocatable units from the
	// old plugin, so waiting for 16 right away could pass before the new
	// plugin even started, and the admission would go to the old, closing
	// endpoint. Wait for the drop first: 16 allocatable units after it can
	// only come from the new plugin's registration and ListAndWatch.
	k.waitResource(t, 16, 0)
	stop = startPlugin(t, client, "--pod-resources-socket=", "--allocate-wait=5s")
	k.waitCapacity(t, 16)
	if err := k.admit(afterPluginRestart); err != nil {
		t.Fatalf("admit after the plugin restart: %v", err)
	}
	if got := k.mountedCard(t, afterPluginRestart, "c0"); got != c1.uuid {
		t.Errorf("after-plugin-restart got card %s, want card 1", got)
	}
	waitRecord(t, client, "after-plugin-restart", api.PhaseAllocated)
	after := records(t, client)
	for _, name := range []string{"single", "multi", "after-restart"} {
		if rec := before[name]; after[name] != rec || !strings.Contains(rec, `"phase":"Allocated"`) {
			t.Errorf("pod %s: record changed across the plugin restart: %s -> %s", name, rec, after[name])
		}
	}
}

// records is each pod's assignment annotation.
func records(t *testing.T, client *fake.Clientset) map[string]string {
	t.Helper()
	pods, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Annotations[api.DefaultNames().AnnotationAssignment()]
	}
	return out
}

// startPlugin runs the plugin as the binary does (app.Run, flags with their
// defaults plus args) on the kubelet's real paths; stop ends it.
func startPlugin(t *testing.T, client *fake.Clientset, args ...string) (stop func()) {
	t.Helper()
	o := app.DefaultOptions()
	fs := flagSet(&o)
	if err := fs.Parse(append([]string{"--nvml=" + spec}, args...)); err != nil {
		t.Fatal(err)
	}
	o.NodeName = node
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, o, app.Clients{Write: client}, nil) }()
	var once sync.Once // stop may run twice: where it is called, and deferred after a failure
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("plugin: %v", err)
			}
		})
	}
}

func waitRecord(t *testing.T, client *fake.Clientset, name string, phase api.AssignmentPhase) {
	t.Helper()
	var got api.AssignmentPhase
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		a, err := api.DefaultNames().AssignmentFromPod(p)
		if err != nil {
			return false, err
		}
		got = a.Phase
		return got == phase, nil
	})
	if err != nil {
		t.Errorf("pod %s: record phase %s, want %s", name, got, phase)
	}
}
