package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// The node agent drives the real kubelet device manager: a device plugin
// that registers is seen as node capacity; a scheduled pod gets devices
// through Allocate and its record shows what the container would get; a pod
// bypassing the scheduler that asks for more than is free fails with the
// kubelet's UnexpectedAdmissionError; after a kubelet (agent) restart the
// plugin registers again, running pods keep their devices; a deleted pod's
// devices go to the next pod.
func TestNodeAgentWithRealDeviceManager(t *testing.T) {
	c := setup(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "dm-node"
	// Not gpushare's resource: this test is about the agent and the device
	// manager, so the extender (interested in gpu-mem only) stays out of it.
	const res = stubResource
	var devices []string
	for i := range 4 {
		devices = append(devices, api.UnitID("GPU-stub-0", int64(i)))
	}

	stateDir := c.NodeStateDir(name)
	plugin := newStubPlugin(filepath.Join(stateDir, "device-plugins"), string(res), devices)
	pctx, stopPlugin := context.WithCancel(ctx)
	pluginDone := make(chan struct{})
	go func() { defer close(pluginDone); plugin.run(pctx, t) }()
	t.Cleanup(func() { stopPlugin(); <-pluginDone })

	opts := cluster.NodeOptions{Name: name, AgentBinary: binDir + "/gpushare-nodeagent", StateDir: stateDir}
	node, err := c.StartNode(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{"dm-a", "dm-b", "dm-c", "dm-bypass"} {
			_ = c.Client.CoreV1().Pods("default").Delete(context.Background(), p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent: %v", err)
		}
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitCapacity(ctx, t, c, name, stubResource, 4, node)

	a := createPod(ctx, t, c, "dm-a", "", stubResource, 2)
	aIDs := runningDevices(ctx, t, c, a, 2, node)

	// Bypassing the scheduler: 3 asked, 2 free -> the kubelet's rejection.
	createPod(ctx, t, c, "dm-bypass", name, stubResource, 3)
	got, err := cluster.WaitPod(ctx, c.Client, "default", "dm-bypass", time.Minute, "Failed", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(got.Status.Message, "Allocate failed") {
		t.Errorf("bypass pod: reason %q message %q, want UnexpectedAdmissionError / Allocate failed ...", got.Status.Reason, got.Status.Message)
	}
	if _, ok := got.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]; ok {
		t.Errorf("rejected pod has a container record: %v", got.Annotations)
	}

	// Kubelet restart: a new agent (new kubelet.sock); the plugin registers
	// again, dm-a keeps its devices (checkpoint), dm-b gets the other two.
	regs := plugin.registrations()
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	if node, err = c.StartNode(opts); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the plugin to register again after the agent restart", func() bool { return plugin.registrations() > regs })
	waitCapacity(ctx, t, c, name, stubResource, 4, node)
	if p, err := c.Client.CoreV1().Pods("default").Get(ctx, "dm-a", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("dm-a after the agent restart: %v %v", p.Status.Phase, err)
	}
	b := createPod(ctx, t, c, "dm-b", "", stubResource, 2)
	bIDs := runningDevices(ctx, t, c, b, 2, node)
	if aIDs.HasAny(bIDs.UnsortedList()...) {
		t.Errorf("after the restart dm-b got %v, overlapping dm-a's %v", sets.List(bIDs), sets.List(aIDs))
	}

	// Deleting dm-a frees its devices for the next pod.
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "dm-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, "default", "dm-a", 30*time.Second); err != nil {
		t.Fatalf("dm-a not removed: %v", err)
	}
	cp := createPod(ctx, t, c, "dm-c", "", stubResource, 2)
	cIDs := runningDevices(ctx, t, c, cp, 2, node)
	if !cIDs.Equal(aIDs) {
		t.Errorf("dm-c got %v, want dm-a's freed devices %v", sets.List(cIDs), sets.List(aIDs))
	}
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(cluster.PollInterval):
		}
	}
}

// stubResource is the stub plugin's resource.
const stubResource corev1.ResourceName = "e2e.example.com/stub"

func waitCapacity(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, res corev1.ResourceName, want int64, node *cluster.Node) {
	t.Helper()
	_, err := cluster.WaitNode(ctx, c.Client, name, time.Minute, fmt.Sprintf("Ready with %d %s", want, res), func(n *corev1.Node) bool {
		q := n.Status.Allocatable[res]
		return cluster.NodeReady(n) && q.Value() == want
	})
	if err != nil {
		t.Fatalf("%v\nagent log: %s", err, node.LogFile())
	}
}

// createPod creates a one-container pod asking for units of res, scheduled
// by schedulerName, or bound to nodeName by hand when it is set.
func createPod(ctx context.Context, t *testing.T, c *cluster.Cluster, name, nodeName string, res corev1.ResourceName, units int64) *corev1.Pod {
	t.Helper()
	pod := lanePod(podtest.Make("default", name).Node(nodeName).Limit("main", res, *resource.NewQuantity(units, resource.DecimalSI)), registryPause)
	created, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// runningDevices waits for the pod to run and checks its record: the
// container got want devices, and the env and mounts the plugin gave for them.
func runningDevices(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, want int, node *cluster.Node) sets.Set[string] {
	t.Helper()
	got, err := cluster.WaitPod(ctx, c.Client, pod.Namespace, pod.Name, time.Minute, "Running", cluster.PodRunning)
	if err != nil {
		t.Fatalf("%v\nagent log: %s", err, node.LogFile())
	}
	rec := containerRecord(t, got, "main")
	ids := rec.DeviceIDs[string(stubResource)]
	if len(ids) != want {
		t.Fatalf("pod %s: container got devices %v, want %d", pod.Name, ids, want)
	}
	if rec.Env["STUB_DEVICES"] != strings.Join(ids, ",") {
		t.Errorf("pod %s: env STUB_DEVICES=%q, want %q", pod.Name, rec.Env["STUB_DEVICES"], strings.Join(ids, ","))
	}
	mounts := sets.New[string]()
	for _, m := range rec.Mounts {
		mounts.Insert(m.ContainerPath)
	}
	for _, id := range ids {
		if !mounts.Has("/dev/stub/" + id) {
			t.Errorf("pod %s: no mount for device %s in %+v", pod.Name, id, rec.Mounts)
		}
	}
	return sets.New(ids...)
}

// containerRecord is what the node agent recorded for the pod's container.
func containerRecord(t *testing.T, pod *corev1.Pod, container string) nodeagent.ContainerRecord {
	t.Helper()
	recs, err := nodeagent.RecordsFromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := recs.Container(container)
	if !ok {
		t.Fatalf("pod %s: no record for container %s: %+v", pod.Name, container, recs)
	}
	return rec
}
