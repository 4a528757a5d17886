package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/gpushare/gpushare/test/cluster"
)

// A device plugin that crashes takes its node's GPU devices with it: the
// kubelet marks them unhealthy the moment its stream breaks and fails every
// GPU pod it admits until a plugin registers again
// (UnexpectedAdmissionError, "no healthy devices present"). The plugin's pod
// turns not Ready (the kubelet's readiness probe; the node agent plays it
// here), and the extender, which follows the plugin pods
// (--device-plugin-selector), binds no GPU pod to that node until one is
// Ready again. Pods created during the outage wait Pending with the reason,
// then run; none fails. The agent restarts the plugin after 6 s, as the
// kubelet's CrashLoopBackOff does after a second crash (10 s), so that the
// outage outlasts the extender's view of it; and it posts the node's
// allocatable every 10 s, as the kubelet does (nodeStatusUpdateFrequency),
// so kube-scheduler's own view of the devices lags as it does on a real
// node.
func TestGPUPodsCreatedWhileThePluginIsDownWaitAndRun(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plugins := testNamespace(ctx, t, c, "plugins")
	node, _ := gpuNode(ctx, t, c, "pr-node", "2x24GiB:NVIDIA-A100",
		withAgentArgs(append(pluginPodArgs(plugins), "--plugin-restart-delay=6s", "--node-status-update-frequency=10s")...))
	ns := testNamespace(ctx, t, c, "pr")
	pluginPod := "device-plugin-pr-node"
	ready := func(want bool) error {
		_, err := cluster.WaitPod(ctx, c.Client, plugins, pluginPod, time.Minute, fmt.Sprintf("Ready=%v", want), func(p *corev1.Pod) bool {
			return podutil.GetPodReadyCondition(p.Status) != nil && podutil.IsPodReady(p) == want
		})
		return err
	}
	if err := ready(true); err != nil {
		t.Fatalf("the plugin's pod: %v\nagent log: %s", err, node.LogFile())
	}
	runPod(ctx, t, c, gpuPod(ns, "before", 4), node)

	pid := node.PluginPID()
	if pid == 0 {
		t.Fatal("no plugin PID")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := ready(false); err != nil {
		t.Fatalf("the plugin's pod after the plugin was killed: %v", err)
	}
	t.Logf("plugin pod not Ready %v after the kill", time.Since(killed).Round(time.Millisecond))
	const pods = 6
	for i := range pods {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, fmt.Sprintf("during-%d", i), 4), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			switch p.Status.Phase {
			case corev1.PodFailed:
				return false, fmt.Errorf("pod %s Failed while the plugin was down: %s: %s", p.Name, p.Status.Reason, p.Status.Message)
			case corev1.PodRunning:
				running++
			}
		}
		return running == pods+1, nil
	})
	if err != nil {
		t.Fatalf("%v\nextender log: %s\nagent log: %s", err, extender.LogPath, node.LogFile())
	}
	t.Logf("all %d pods created during the outage Running %v after the kill", pods, time.Since(killed).Round(time.Millisecond))
}
