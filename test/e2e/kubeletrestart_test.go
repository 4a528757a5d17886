package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// A kubelet that restarts reads its device checkpoint and reports gpu-mem
// with no device (capacity 0) until the plugin registers with it again; it
// fails every GPU pod it admits meanwhile. Here the plugin is held stopped
// (SIGSTOP) across the agent's restart, so that window stays open: a GPU
// pod created in it stays Pending, unbound, the extender's /inspect shows
// the node not serving with the kubelet's reason; once the plugin runs again
// (it finds its socket gone and registers with the new kubelet) the pod
// is bound there and runs, and the pod that ran before the restart still
// runs.
func TestNoGPUPodBoundToARestartedKubeletUntilThePluginRegistersAgain(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	names := api.DefaultNames()
	node, _ := gpuNode(ctx, t, c, "kr-node", "1x24GiB:NVIDIA-A100", withPluginLeftRunning())
	ns := testNamespace(ctx, t, c, "kr")
	runPod(ctx, t, c, gpuPod(ns, "before", 4), node)

	pid := node.PluginPID()
	if pid == 0 {
		t.Fatal("no plugin PID")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT plugin %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(resume) // before gpuNode's cleanup stops it

	n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Opts.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := cluster.ReadyMessage(n)
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted, err := c.StartNode(node.Opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	if _, err := cluster.WaitNodeAgentReplaced(ctx, c.Client, node.Opts.Name, before, time.Minute, "gpu-mem capacity 0", func(n *corev1.Node) bool {
		q, ok := n.Status.Capacity[names.ResourceName()]
		return cluster.NodeReady(n) && ok && q.IsZero()
	}); err != nil {
		t.Fatalf("%v\nagent log: %s", err, restarted.LogFile())
	}

	// The extender's view: the node's cards shown, none placeable, with the reason.
	var info api.ExtenderNode
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var got api.ExtenderNode
		if err := getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/inspect/%s", extenderPort, node.Opts.Name), &got); err != nil {
			return false, nil
		}
		info = got
		return info.InventoryErrorCode == api.InventoryErrorPluginNotServing, nil
	}); err != nil {
		t.Fatalf("extender /inspect/%s: %+v; want %s while the kubelet reports no device", node.Opts.Name, info, api.InventoryErrorPluginNotServing)
	}
	if !strings.Contains(info.InventoryError, "kubelet reports no GPU device") || len(info.Cards) != 1 {
		t.Errorf("extender /inspect: error %q, %d cards; want the kubelet's reason and the card kept", info.InventoryError, len(info.Cards))
	}

	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "during", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cluster.WaitPod(ctx, c.Client, ns, "during", time.Minute, "judged unschedulable or bound", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" || unschedulable(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod during bound to %s while its kubelet reported no device (phase %s %s)", p.Spec.NodeName, p.Status.Phase, p.Status.Message)
	}
	t.Logf("pod during, plugin not registered: %s", podScheduledMessage(p))

	resume()
	waitRunning(ctx, t, c, ns, "during", restarted)
	if err := waitAllRunning(ctx, c, ns, 2); err != nil {
		t.Fatalf("%v\nagent log: %s", err, restarted.LogFile())
	}
}

// unschedulable reports whether kube-scheduler marked p Unschedulable.
func unschedulable(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// podScheduledMessage is p's PodScheduled condition's message.
func podScheduledMessage(p *corev1.Pod) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			return cond.Message
		}
	}
	return ""
}

// getJSON GETs url and decodes its JSON body into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// A kubelet that dies (SIGKILL) leaves its Node as it was: gpu-mem capacity
// unchanged, the plugin pod Ready, for as long as it is down. Every GPU pod
// bound to the node meanwhile is admitted by the next kubelet at once, before
// the plugin has registered with it, and fails. The plugin sees the kubelet's
// ListAndWatch stream end at the kill and says so in the inventory it
// publishes; here a GPU pod created while the kubelet is down stays Pending,
// unbound, with the plugin's reason in /inspect, and runs on the node once a
// new kubelet streams from the plugin again.
func TestNoGPUPodBoundToANodeWhoseKubeletIsDown(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	node, _ := gpuNode(ctx, t, c, "kd-node", "1x24GiB:NVIDIA-A100", withPluginLeftRunning())
	ns := testNamespace(ctx, t, c, "kd")
	runPod(ctx, t, c, gpuPod(ns, "before", 4), node)

	// As a kubelet crash: the agent's process group (the plugin runs in its own session).
	if err := killGroup(node.PID()); err != nil {
		t.Fatal(err)
	}
	if err := waitExited(ctx, node.Exited); err != nil {
		t.Fatal(err)
	}
	var info api.ExtenderNode
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var got api.ExtenderNode
		if err := getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/inspect/%s", extenderPort, node.Opts.Name), &got); err != nil {
			return false, nil
		}
		info = got
		return info.InventoryErrorCode == api.InventoryErrorPluginNotServing, nil
	}); err != nil {
		t.Errorf("extender /inspect/%s 30 s after its kubelet died: %+v; want %s", node.Opts.Name, info, api.InventoryErrorPluginNotServing)
	}

	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "during", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cluster.WaitPod(ctx, c.Client, ns, "during", time.Minute, "judged unschedulable or bound", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" || unschedulable(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod during bound to %s while its kubelet was down: the next kubelet admits it before the plugin registers and fails it", p.Spec.NodeName)
	}
	t.Logf("pod during, kubelet down: %s", podScheduledMessage(p))

	restarted, err := c.StartNode(node.Opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	waitRunning(ctx, t, c, ns, "during", restarted)
	if err := waitAllRunning(ctx, c, ns, 2); err != nil {
		t.Fatalf("%v\nagent log: %s", err, restarted.LogFile())
	}
}
