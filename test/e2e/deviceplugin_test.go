package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// A simulated GPU node running gpushare's real device plugin (simulated
// NVML, mixed card sizes) beside the kubelet device manager: the Node shows
// the plugin's inventory and, as allocatable gpu-mem, the sum of the cards'
// units; a pod that bypasses the scheduler (spec.nodeName by hand) is
// refused by the plugin and fails with the kubelet's UnexpectedAdmissionError,
// no GPU; after a kubelet (agent) restart with the plugin left running, the
// plugin registers again and still answers.
func TestDevicePluginOnSimulatedNode(t *testing.T) {
	c := setup(t)
	needRoot(t)
	plugin := pluginBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "plugin-node"

	opts := cluster.NodeOptions{
		Name: name, AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
		Labels:       api.LabelEnabled + "=true",
		PluginBinary: plugin,
		PluginArgs:   []string{"--nvml=spec:2x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100"},
		// The agent restart below must leave the plugin running; Cleanup stops it.
		LeavePluginRunning: true,
	}
	node, err := c.StartNode(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{"bypass-1", "bypass-2"} {
			_ = c.Client.CoreV1().Pods("default").Delete(context.Background(), p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent: %v", err)
		}
		node.StopPlugin()
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	var inv api.Inventory
	n, err := cluster.WaitNode(ctx, c.Client, name, 2*time.Minute, "Ready with the plugin's inventory and capacity", func(n *corev1.Node) bool {
		got, err := api.DefaultNames().InventoryFromNode(n)
		if err != nil || len(got.Cards) == 0 {
			return false
		}
		inv = got
		q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		return cluster.NodeReady(n) && q.Value() == got.TotalUnits()
	})
	if err != nil {
		t.Fatalf("%v\nagent log: %s\nplugin log: %s", err, node.LogFile(), filepath.Join(c.NodeStateDir(name), "plugin.log"))
	}
	if len(inv.Cards) != 3 {
		t.Errorf("inventory has %d cards, want 3: %+v", len(inv.Cards), inv)
	}
	sizes := map[int64]int{}
	for _, card := range inv.Cards {
		sizes[card.Units]++
	}
	if len(sizes) != 2 {
		t.Errorf("want two card sizes on the node, got units per card %v", sizes)
	}
	q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
	t.Logf("node %s: allocatable %s=%s, cards %+v", name, api.DefaultNames().ResourceName(), q.String(), inv.Cards)

	bypass := func(pod string) *corev1.Pod {
		t.Helper()
		createPod(ctx, t, c, pod, name, api.DefaultNames().ResourceName(), 4)
		got, err := cluster.WaitPod(ctx, c.Client, "default", pod, time.Minute, "Failed", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed
		})
		if err != nil {
			t.Fatalf("%v\nagent log: %s", err, node.LogFile())
		}
		if got.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(got.Status.Message, "Allocate failed") {
			t.Errorf("pod %s: reason %q message %q, want UnexpectedAdmissionError / Allocate failed ...", pod, got.Status.Reason, got.Status.Message)
		}
		if _, ok := got.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]; ok {
			t.Errorf("pod %s was refused but has a container record", pod)
		}
		t.Logf("pod %s: %s: %s", pod, got.Status.Reason, got.Status.Message)
		return got
	}
	first := bypass("bypass-1")

	// Kubelet restart, plugin left running: it must register with the new
	// kubelet.sock; the answer for the next bypass pod comes from it again.
	pluginPID := node.PluginPID()
	node = restartAgent(ctx, t, c, node)
	if got := node.PluginPID(); got != pluginPID || pluginPID == 0 {
		t.Errorf("plugin PID %d after the agent restart, want the adopted %d", got, pluginPID)
	}
	second := bypass("bypass-2")
	// The plugin refuses with gRPC FailedPrecondition; the device manager's
	// own refusals (no plugin, no healthy devices) carry no gRPC code.
	for _, msg := range []string{first.Status.Message, second.Status.Message} {
		if !strings.Contains(msg, "FailedPrecondition") {
			t.Errorf("refusal not from the plugin (not registered?): %q", msg)
		}
	}
}

// pluginBinary builds gpushare's device plugin, or skips when it is not
// written yet.
func pluginBinary(t *testing.T) string {
	t.Helper()
	return productBinary(t, "gpushare-device-plugin", "deviceplugin")
}

// productBinary builds the product program in dir (once per run), or skips
// the test when dir/main.go does not exist yet.
func productBinary(t *testing.T, name, dir string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cluster.RepoRoot(), dir, "main.go")); err != nil {
		t.Skipf("%s/main.go does not exist yet", dir)
	}
	out := filepath.Join(binDir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := goBuildProduct(out, "./"+dir); err != nil {
		t.Fatal(err)
	}
	return out
}
