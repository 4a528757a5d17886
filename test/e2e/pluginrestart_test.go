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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/gpushare/gpushare/api"
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
	err := waitAllRunning(ctx, c, ns, pods+1)
	if err != nil {
		t.Fatalf("%v\nextender log: %s\nagent log: %s", err, extender.LogPath, node.LogFile())
	}
	t.Logf("all %d pods created during the outage Running %v after the kill", pods, time.Since(killed).Round(time.Millisecond))
}

// With a standby (the chart's second plugin container, here the agent's
// --plugin-standby) a crash costs nothing: the kubelet keeps one endpoint per
// plugin socket and the node's GPU devices stay healthy while the other
// plugin serves, so GPU pods created at the moment of the crash and after it
// are admitted as usual; the plugin pod is not Ready while one container
// restarts, yet the extender keeps placing GPU pods on the node (one
// container ready is enough). The node's duties (inventory, memory
// sampling) move to the survivor when the killed plugin held them. Then the
// other plugin is killed the same way once the first is back: each of the
// two can fall without a pod lost.
func TestAStandbyPluginKeepsTheNodeServingThroughACrash(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plugins := testNamespace(ctx, t, c, "plugins")
	node, _ := gpuNode(ctx, t, c, "sb-node", "2x24GiB:NVIDIA-A100",
		withAgentArgs(append(pluginPodArgs(plugins), "--plugin-standby", "--plugin-restart-delay=6s", "--node-status-update-frequency=10s")...))
	ns := testNamespace(ctx, t, c, "sb")
	pluginPod := "device-plugin-sb-node"
	containersReady := func(want int) error {
		_, err := cluster.WaitPod(ctx, c.Client, plugins, pluginPod, time.Minute, fmt.Sprintf("%d containers ready", want), func(p *corev1.Pod) bool {
			n := 0
			for _, s := range p.Status.ContainerStatuses {
				if s.Ready {
					n++
				}
			}
			return n == want
		})
		return err
	}
	if err := containersReady(2); err != nil {
		t.Fatalf("the plugin's pod: %v\nagent log: %s", err, node.LogFile())
	}
	runPod(ctx, t, c, gpuPod(ns, "before", 4), node)

	logs := map[string]string{"plugin": filepath.Join(node.Opts.StateDir, "plugin.log"), "standby": filepath.Join(node.Opts.StateDir, "plugin-standby.log")}
	pids := map[string]func() int{"plugin": node.PluginPID, "standby": node.StandbyPluginPID}
	holder := func() string {
		for name, f := range logs {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "Holding the node lock") {
				return name
			}
		}
		return ""
	}
	first := holder()
	if first == "" {
		t.Fatalf("neither plugin says it holds the node lock (%s, %s)", logs["plugin"], logs["standby"])
	}
	second := map[string]string{"plugin": "standby", "standby": "plugin"}[first]
	created := 1
	for round, victim := range []string{first, second} {
		pid := pids[victim]()
		if pid == 0 {
			t.Fatalf("round %d: no PID for the %s", round, victim)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		// GPU pods arrive through the crash: the first at once, before the
		// plugin pod's readiness can say anything, the last after it did.
		for i := range 6 {
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, fmt.Sprintf("r%d-%d", round, i), 2), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created++
			time.Sleep(500 * time.Millisecond)
		}
		if err := waitAllRunning(ctx, c, ns, created); err != nil {
			t.Fatalf("round %d (%s killed): %v\nextender log: %s\nagent log: %s", round, victim, err, extender.LogPath, node.LogFile())
		}
		t.Logf("round %d: %s killed; %d pods created through the crash Running %v after the kill", round, victim, 6, time.Since(killed).Round(time.Millisecond))
		if round == 0 {
			survivor := logs[second]
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				b, _ := os.ReadFile(survivor)
				return strings.Contains(string(b), "Holding the node lock"), nil
			}); err != nil {
				t.Fatalf("the %s did not take the node's duties over after the %s was killed (%s)", second, first, survivor)
			}
		}
		// The killed plugin is back (restarted after 6 s) before the other falls.
		if err := containersReady(2); err != nil {
			t.Fatalf("round %d: the %s did not come back: %v", round, victim, err)
		}
	}
	// No pod waited for the plugin: the extender never took the node for one
	// whose plugin is not serving while the other container served.
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, api.ErrPluginNotServing.Error()) {
			t.Errorf("pod %s waited for the plugin although its standby served: %s", e.InvolvedObject.Name, e.Message)
		}
	}
}

// waitAllRunning waits until want pods of ns run; a Failed pod ends the wait
// with the kubelet's reason.
func waitAllRunning(ctx context.Context, c *cluster.Cluster, ns string, want int) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			switch p.Status.Phase {
			case corev1.PodFailed:
				return false, fmt.Errorf("pod %s Failed: %s: %s", p.Name, p.Status.Reason, p.Status.Message)
			case corev1.PodRunning:
				running++
			}
		}
		return running == want, nil
	})
}
