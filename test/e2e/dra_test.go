package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/test/cluster"
)

// draDriver is the DRA driver's name under the default names: the domain.
const draDriver = "gpushare.example.com"

// draNode starts a node agent whose plugin runs in DRA mode (--dra) with
// cards of spec (and args), and waits for its ResourceSlice.
func draNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name, spec string, args ...string) (*cluster.Node, *resourceapi.ResourceSlice) {
	t.Helper()
	state := c.NodeStateDir(name)
	node, err := c.StartNode(cluster.NodeOptions{
		Name: name, AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
		PluginBinary: pluginBinary(t),
		PluginArgs: append([]string{"--nvml=spec:" + spec, "--dra",
			"--dra-registry-dir", filepath.Join(state, "plugins_registry"),
			"--dra-plugin-dir", filepath.Join(state, "plugins", draDriver),
			"--dra-cdi-dir", filepath.Join(state, "cdi")}, args...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent %s: %v", name, err)
		}
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	var slice *resourceapi.ResourceSlice
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Spec.Driver == draDriver {
				slice = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(state, "plugin.log"))
		t.Fatalf("no ResourceSlice of %s for node %s: %v\nplugin log:\n%s", draDriver, name, err, log)
	}
	return node, slice
}

// applyDeviceClass applies the chart's DRA objects (the DeviceClass, the
// slice policy), rendered for namespace ns, until the test ends.
func applyDeviceClass(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	class := renderChart(ctx, t, ns, "templates/dra.yaml", "--set", "dra.enabled=true")
	file := filepath.Join(t.TempDir(), "deviceclass.yaml")
	if err := os.WriteFile(file, class, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the chart's DeviceClass: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file) })
}

// memoryClaim is a claim for memory of one card of the driver's class.
func memoryClaim(ns, name, memory string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: draDriver,
				Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}},
			},
		}}}},
	}
}

// claimPod is a pod using claim, for node.
func claimPod(ns, name, claim, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: schedulerName,
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
		},
	}
}

// GPU memory through DRA, on the control plane: the node agent in DRA mode
// publishes its card as one shareable device with 40Gi of memory; the real
// kube-scheduler's DRA allocator puts claims of 10Gi and 20Gi on that one
// card, keeps a claim that fits no card pending with a reason, and gives a
// deleted pod's memory to the next claim.
func TestDRAClaimsShareACardByMemory(t *testing.T) {
	c := setup(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := testNamespace(ctx, t, c, "dra")
	applyDeviceClass(ctx, t, c, ns)

	node, slice := draNode(ctx, t, c, "dra-a", "1x40GiB:NVIDIA-A100")
	if n := len(slice.Spec.Devices); n != 1 {
		t.Fatalf("slice devices %d, want 1", n)
	}
	dev := slice.Spec.Devices[0]
	capacity := dev.Capacity["memory"].Value
	if dev.Name != "card-0" || dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations || capacity.String() != "40Gi" {
		t.Fatalf("device %+v, want card-0, shareable, 40Gi of memory", dev)
	}

	// As root on dra-a would, with the node agent's token: another node's
	// slice is refused by the chart's policy, its own is not.
	agent := pluginIdentityOn(ctx, t, c, ns, "dra-a", "--set", "dra.enabled=true")
	forged := slice.DeepCopy()
	forged.ObjectMeta = metav1.ObjectMeta{GenerateName: "forged-"}
	forged.Spec.NodeName = ptr.To("dra-b")
	forged.Spec.Pool.Name = "dra-b"
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := agent.ResourceV1().ResourceSlices().Create(ctx, forged, dry)
	wantError(t, "a slice for another node", err, "writes only its own node's gpushare.example.com ResourceSlice", "This token is for node dra-a; the slice is for node dra-b")
	// Its own node name, but dra-b's pool at a higher generation: that would
	// replace dra-b's cards for the scheduler.
	forged.Spec.NodeName, forged.Spec.Pool.Name, forged.Spec.Pool.Generation = ptr.To("dra-a"), "dra-b", slice.Spec.Pool.Generation+100
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, forged, dry)
	wantError(t, "a slice of another node's pool", err, "the slice is for node dra-a, pool dra-b", "Publish it with pool and node both dra-a")
	forged.Spec.NodeName, forged.Spec.Pool.Name, forged.Spec.Pool.Generation = ptr.To("dra-a"), "dra-a", slice.Spec.Pool.Generation
	if _, err := agent.ResourceV1().ResourceSlices().Create(ctx, forged, dry); err != nil {
		t.Errorf("the node agent on dra-a writing a slice for dra-a: %v, want allowed", err)
	}

	for _, cl := range []struct{ name, memory string }{{"ten", "10Gi"}, {"twenty", "20Gi"}, {"fifty", "50Gi"}, {"fifteen", "15Gi"}} {
		if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, cl.name, cl.memory), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ten", "twenty"} {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, claimPod(ns, name, name, "dra-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ten", "twenty"} {
		waitScheduled(ctx, t, c, ns, name, "dra-a")
	}
	shares := map[string]bool{}
	for name, want := range map[string]string{"ten": "10Gi", "twenty": "20Gi"} {
		cl, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s allocation %+v", name, cl.Status.Allocation)
		}
		r := cl.Status.Allocation.Devices.Results[0]
		got := r.ConsumedCapacity["memory"]
		if r.Driver != draDriver || r.Pool != "dra-a" || r.Device != "card-0" || got.String() != want || r.ShareID == nil {
			t.Errorf("claim %s: %s/%s/%s consumed %s share %v, want card-0 of dra-a consuming %s with a share ID", name, r.Driver, r.Pool, r.Device, got.String(), r.ShareID, want)
		} else {
			shares[string(*r.ShareID)] = true
		}
	}
	if len(shares) != 2 {
		t.Errorf("the two claims' share IDs %v, want two different ones on one card", shares)
	}

	// 50Gi fits no card; 15Gi does not fit the 10Gi left.
	for _, name := range []string{"fifty", "fifteen"} {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, claimPod(ns, name, name, "dra-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fifty", "fifteen"} {
		msg := waitUnschedulable(ctx, t, c, ns, name)
		if !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("pod %s waits with %q, want the DRA allocator's reason", name, msg)
		}
	}

	// Deleting a pod and its claim returns its memory: 15Gi now fits.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "ten", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, "ten", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitScheduled(ctx, t, c, ns, "fifteen", "dra-a")
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "fifty", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("the 50Gi pod: node %q, %v; want still pending", p.Spec.NodeName, err)
	}

	// The driver killed and restarted by its node agent: the slice is the
	// same card, the allocations stand, and the 5Gi left still fit a claim
	// of 5Gi — not one of 6Gi.
	before := node.PluginPID()
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pid := node.PluginPID()
		return pid > 0 && pid != before, nil
	}); err != nil {
		t.Fatalf("the node agent did not restart the driver: %v", err)
	}
	after := draSlice(ctx, t, c, "dra-a")
	if after.Name != slice.Name || len(after.Spec.Devices) != 1 || after.Spec.Devices[0].Name != "card-0" {
		t.Errorf("after the driver's restart the slice is %s with %d devices, want %s with card-0", after.Name, len(after.Spec.Devices), slice.Name)
	}
	for _, cl := range []struct{ name, memory string }{{"six", "6Gi"}, {"five", "5Gi"}} {
		if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, cl.name, cl.memory), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, claimPod(ns, cl.name, cl.name, "dra-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitScheduled(ctx, t, c, ns, "five", "dra-a")
	if msg := waitUnschedulable(ctx, t, c, ns, "six"); !strings.Contains(msg, "cannot allocate all claims") {
		t.Errorf("the 6Gi pod waits with %q", msg)
	}

	// An operator isolates the card: the slice carries a NoSchedule device
	// taint (accepted by the API server), and the claims on it keep it.
	patch := []byte(`{"metadata":{"annotations":{"gpushare.example.com/isolate":"0"}}}`)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "dra-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var tainted *resourceapi.ResourceSlice
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		tainted = draSlice(ctx, t, c, "dra-a")
		return len(tainted.Spec.Devices) == 1 && len(tainted.Spec.Devices[0].Taints) == 1, nil
	}); err != nil {
		t.Fatalf("no taint on the isolated card: %+v", tainted.Spec.Devices)
	}
	if taint := tainted.Spec.Devices[0].Taints[0]; taint.Key != "gpushare.example.com/isolated" || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("the isolated card's taint %+v, want gpushare.example.com/isolated NoSchedule", taint)
	}
	for _, name := range []string{"twenty", "fifteen", "five"} {
		cl, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || cl.Status.Allocation == nil {
			t.Errorf("claim %s after the isolation: %v, allocation %v; want it kept", name, err, cl.Status.Allocation)
		}
	}
}

// draSlice is the driver's ResourceSlice of node (the test fails without one).
func draSlice(ctx context.Context, t *testing.T, c *cluster.Cluster, node string) *resourceapi.ResourceSlice {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Spec.Driver == draDriver {
			return &list.Items[i]
		}
	}
	t.Fatalf("no ResourceSlice of %s for node %s", draDriver, node)
	return nil
}

// waitScheduled waits for the pod to be bound to node.
func waitScheduled(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, node string) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return p.Spec.NodeName != "", nil
	})
	if err != nil || last.Spec.NodeName != node {
		t.Fatalf("pod %s: node %q (%v), want %s; conditions %+v", name, last.Spec.NodeName, err, node, last.Status.Conditions)
	}
}

// waitUnschedulable waits for the pod's PodScheduled=False condition and
// returns its message.
func waitUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s", name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				msg = cond.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return msg
}
