package nodeagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

const testNode = "gpu-1"

// fakeDM stands in for the kubelet device manager: it records the order of
// Allocate calls and fails those for pods named in fail.
type fakeDM struct {
	mu       sync.Mutex
	order    []string
	fail     map[string]error
	capacity corev1.ResourceList
	released int
	// onAllocate, if set, runs at the start of every Allocate.
	onAllocate func(pod *corev1.Pod)
}

func (f *fakeDM) Allocate(pod *corev1.Pod, c *corev1.Container) error {
	if f.onAllocate != nil {
		f.onAllocate(pod)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[pod.Name]; err != nil {
		return err
	}
	f.order = append(f.order, pod.Name+"/"+c.Name)
	return nil
}

func (f *fakeDM) GetDeviceRunContainerOptions(pod *corev1.Pod, c *corev1.Container) (*devicemanager.DeviceRunContainerOptions, error) {
	return &devicemanager.DeviceRunContainerOptions{
		Envs:   []kubecontainer.EnvVar{{Name: "CARD", Value: pod.Name + "-" + c.Name}},
		Mounts: []kubecontainer.Mount{{ContainerPath: "/dev/card/" + c.Name, HostPath: "/dev/null", ReadOnly: true}},
	}, nil
}

func (f *fakeDM) GetDevices(podUID, containerName string) devicemanager.ResourceDeviceInstances {
	return devicemanager.ResourceDeviceInstances{string(api.DefaultNames().ResourceName()): {"GPU-a::" + containerName: {ID: "GPU-a::" + containerName}}}
}

func (f *fakeDM) GetAllocatableDevices() devicemanager.ResourceDeviceInstances { return nil }

func (f *fakeDM) GetCapacity() (corev1.ResourceList, corev1.ResourceList, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity.DeepCopy(), f.capacity.DeepCopy(), nil
}

func (f *fakeDM) UpdateAllocatedDevices() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
}

func (f *fakeDM) Stop() error { return nil }

func (f *fakeDM) allocated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

func gpuPod(name string, created time.Time, containers ...string) *corev1.Pod {
	b := podtest.Make("default", name).UID("uid-" + name).Node(testNode).Phase(corev1.PodPending).Created(created).Image("pause")
	for _, c := range containers {
		b.GPU(c, 1)
	}
	return b.Obj()
}

// runAgent runs an agent over a fake clientset until the test ends.
func runAgent(t *testing.T, dm *fakeDM, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	return runAgentWith(t, Config{}, dm, pods...)
}

// runAgentWith runs an agent with cfg's settings besides the test's own.
func runAgentWith(t *testing.T, cfg Config, dm *fakeDM, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	for _, p := range pods {
		if err := client.Tracker().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	cfg.NodeName, cfg.Client, cfg.SyncInterval = testNode, client, 50*time.Millisecond
	cfg.StartDeviceManager = func(func() []*corev1.Pod) (DeviceManager, error) { return dm, nil }
	agent, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return client
}

func waitPod(t *testing.T, client *fake.Clientset, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s: condition not reached: %v; last: %+v", name, err, last)
	}
	return last
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func TestPodsWaitingTogetherAreAdmittedOldestFirstAndRecorded(t *testing.T) {
	now := time.Now()
	dm := &fakeDM{}
	client := runAgent(t, dm,
		gpuPod("young", now, "main"),
		gpuPod("old", now.Add(-2*time.Minute), "a", "b"),
		gpuPod("middle", now.Add(-time.Minute), "main"),
	)
	for _, n := range []string{"young", "old", "middle"} {
		waitPod(t, client, n, running)
	}
	if diff := cmp.Diff([]string{"old/a", "old/b", "middle/main", "young/main"}, dm.allocated()); diff != "" {
		t.Errorf("Allocate order (-want +got):\n%s", diff)
	}
	p := waitPod(t, client, "old", running)
	recs, err := RecordsFromPod(p)
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerRecords{Version: RecordVersion, Node: testNode, Containers: []ContainerRecord{
		{Name: "a", DeviceIDs: map[string][]string{string(api.DefaultNames().ResourceName()): {"GPU-a::a"}}, Env: map[string]string{"CARD": "old-a"},
			Mounts: []Mount{{ContainerPath: "/dev/card/a", HostPath: "/dev/null", ReadOnly: true}}},
		{Name: "b", DeviceIDs: map[string][]string{string(api.DefaultNames().ResourceName()): {"GPU-a::b"}}, Env: map[string]string{"CARD": "old-b"},
			Mounts: []Mount{{ContainerPath: "/dev/card/b", HostPath: "/dev/null", ReadOnly: true}}},
	}}
	if diff := cmp.Diff(want, recs); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if len(p.Status.ContainerStatuses) != 2 || !p.Status.ContainerStatuses[0].Ready {
		t.Errorf("container statuses: %+v", p.Status.ContainerStatuses)
	}
}

// Without container records the agent writes to a pod only what a kubelet
// does (its status), and still allocates its devices.
func TestNoContainerRecordsWritesOnlyTheStatus(t *testing.T) {
	dm := &fakeDM{}
	client := runAgentWith(t, Config{NoContainerRecords: true}, dm, gpuPod("p", time.Now(), "main"))
	p := waitPod(t, client, "p", running)
	if _, ok := p.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]; ok {
		t.Errorf("pod has container records: %v", p.Annotations)
	}
	if got := dm.allocated(); len(got) != 1 {
		t.Errorf("allocated %v, want p/main", got)
	}
	var patches int
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" && a.GetSubresource() == "" {
			patches++
		}
	}
	if patches != 0 {
		t.Errorf("%d patches of the pod itself, want none (only its status)", patches)
	}
}

func TestFailedAllocateRejectsPodWithKubeletReason(t *testing.T) {
	dm := &fakeDM{fail: map[string]error{"bypass": errors.New("pod has no assignment")}}
	client := runAgent(t, dm, gpuPod("bypass", time.Now(), "main"))
	p := waitPod(t, client, "bypass", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != "UnexpectedAdmissionError" {
		t.Errorf("reason %q, want UnexpectedAdmissionError", p.Status.Reason)
	}
	if want := "Allocate failed due to pod has no assignment, which is unexpected"; p.Status.Message != want {
		t.Errorf("message %q, want %q", p.Status.Message, want)
	}
	if _, ok := p.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]; ok {
		t.Errorf("rejected pod has a record")
	}
}

func TestNodeIsRegisteredReadyWithDeviceCapacity(t *testing.T) {
	dm := &fakeDM{capacity: corev1.ResourceList{api.DefaultNames().ResourceName(): resource.MustParse("80")}}
	client := runAgent(t, dm)
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		return q.Value() == 80, nil
	})
	if err != nil {
		t.Fatalf("node never got 80 %s: %+v", api.DefaultNames().ResourceName(), node)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		t.Errorf("node not Ready: %+v", node.Status.Conditions)
	}
	// The lease is written by its own loop, not necessarily before the
	// first status: wait for it.
	var leaseErr error
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, leaseErr = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		return leaseErr == nil, nil
	}); err != nil {
		t.Errorf("no node lease: %v", leaseErr)
	}
}

func TestDeletedPodIsRemovedAndItsDevicesReleased(t *testing.T) {
	p := gpuPod("leaving", time.Now(), "main")
	p.Status.Phase = corev1.PodRunning
	now := metav1.Now()
	p.DeletionTimestamp = &now
	p.Finalizers = nil
	dm := &fakeDM{}
	client := runAgent(t, dm, p)
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "leaving", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod being deleted was not removed: %v", err)
	}
	dm.mu.Lock()
	released := dm.released
	dm.mu.Unlock()
	if released == 0 {
		t.Errorf("devices of the deleted pod were not released (UpdateAllocatedDevices never called)")
	}
	if got := dm.allocated(); len(got) != 0 {
		t.Errorf("a pod being deleted was admitted: %v", got)
	}
}

// The agent lists the pods waiting for admission once per sync and admits
// them one after the other; a pod deleted meanwhile must not be admitted
// (the kubelet starts no container of a pod being deleted). Seen in the
// chaos run: a pod deleted while the agent admitted older ones was admitted
// anyway and reported Running while the device manager released its units.
func TestPodDeletedWhileOthersAreAdmittedIsNotAdmitted(t *testing.T) {
	now := time.Now()
	first, second := gpuPod("first", now.Add(-time.Minute), "main"), gpuPod("second", now, "main")
	client := fake.NewClientset(first, second)
	dm := &fakeDM{}
	agent, err := New(Config{
		NodeName: testNode, Client: client, SyncInterval: 50 * time.Millisecond,
		StartDeviceManager: func(func() []*corev1.Pod) (DeviceManager, error) { return dm, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	dm.onAllocate = func(pod *corev1.Pod) {
		if pod.Name != "first" {
			return
		}
		once.Do(func() {
			// Delete "second" while "first" is being admitted, and wait
			// until the agent's pod cache shows it.
			p, err := client.CoreV1().Pods("default").Get(context.Background(), "second", metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			ts := metav1.Now()
			p.DeletionTimestamp = &ts
			if _, err := client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
				return
			}
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				cur, err := agent.pods.Pods("default").Get("second")
				return err == nil && cur.DeletionTimestamp != nil, nil
			}); err != nil {
				t.Errorf("the agent's cache never saw the deletion: %v", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	waitPod(t, client, "first", running)
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "second", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted pod was not removed: %v", err)
	}
	if diff := cmp.Diff([]string{"first/main"}, dm.allocated()); diff != "" {
		t.Errorf("Allocate calls (-want +got):\n%s", diff)
	}
}

// A pod deleted during its own admission (between Allocate and the report)
// is not reported Running: seen in the chaos run, where the device manager
// had already released its devices and its run options were empty.
func TestPodDeletedDuringItsAdmissionIsNotReportedRunning(t *testing.T) {
	client := fake.NewClientset(gpuPod("leaving", time.Now(), "main"))
	dm := &fakeDM{}
	agent, err := New(Config{
		NodeName: testNode, Client: client, SyncInterval: 50 * time.Millisecond,
		StartDeviceManager: func(func() []*corev1.Pod) (DeviceManager, error) { return dm, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	dm.onAllocate = func(pod *corev1.Pod) {
		once.Do(func() {
			p, err := client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			ts := metav1.Now()
			p.DeletionTimestamp = &ts
			if _, err := client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
				return
			}
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				cur, err := agent.pods.Pods("default").Get(pod.Name)
				return err == nil && cur.DeletionTimestamp != nil, nil
			}); err != nil {
				t.Errorf("the agent's cache never saw the deletion: %v", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "leaving", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted pod was not removed: %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
			t.Errorf("the pod deleted during its admission got a status patch (reported Running)")
		}
	}
}
