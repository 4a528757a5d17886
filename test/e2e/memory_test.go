package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	memusage "github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// Memory enforcement end to end (issue 13), once per mode. On one simulated
// 16 GiB card: "over" was granted 4 GiB and uses 6 GiB, "neighbour" was
// granted 4 GiB and uses 2 GiB, "nogrant" asked for no GPU memory and uses
// 1 GiB of the card anyway. Each use is a real process that the node agent
// runs in a cgroup named like the kubelet's; the simulated NVML reports its
// memory; the device plugin maps PID → cgroup → pod → container as on a
// real node. report: Warning Events on over and nogrant; evict: both
// evicted; kill: their processes killed. The neighbour is never touched.
func TestMemoryEnforcement(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	for _, mode := range []memusage.Mode{memusage.ModeReport, memusage.ModeEvict, memusage.ModeKill} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			name := "mem-" + string(mode)
			procs := filepath.Join(c.NodeStateDir(name), nodeagent.GPUProcessesFileName)
			node, _ := gpuNode(ctx, t, c, name, "1x16GiB", withLabels(api.LabelEnabled+"=true,e2e-memory="+string(mode)),
				withPluginArgs("--memory-enforcement="+string(mode), "--memory-sample-interval=250ms", "--memory-grace=2s", "--nvml-sim-processes="+procs))
			ns := testNamespace(ctx, t, c, name)

			use := func(p *corev1.Pod, v string) *corev1.Pod {
				p.Annotations = map[string]string{api.DefaultNames().AnnotationSimulatedGPUUse(): v}
				p.Spec.NodeSelector = map[string]string{"e2e-memory": string(mode)}
				return p
			}
			over := use(gpuPod(ns, "over", 4), "c0=6144")
			neighbour := use(gpuPod(ns, "neighbour", 4), "c0=2048")
			nogrant := use(&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "nogrant", Namespace: ns},
				Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{Name: "c0", Image: "registry.k8s.io/pause:3.10"}}},
			}, "c0=1024@0")
			for _, p := range []*corev1.Pod{neighbour, over, nogrant} {
				runPod(ctx, t, c, p, node)
			}
			logs := "\nagent log: " + node.LogFile() + "\nplugin log: " + filepath.Join(c.NodeStateDir(name), "plugin.log")

			// The three processes, by the memory each uses.
			var pids map[uint64]uint32
			err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
				pids = simPIDs(procs)
				return len(pids) == 3, nil
			})
			if err != nil {
				t.Fatalf("the agent's process file lists %v, want three processes%s", pids, logs)
			}

			reason := map[memusage.Mode]string{memusage.ModeReport: memusage.ReasonOverGrant, memusage.ModeEvict: memusage.ReasonEvicted, memusage.ModeKill: memusage.ReasonKilled}[mode]
			for _, p := range []string{"over", "nogrant"} {
				if err := waitEvent(ctx, c, ns, p, reason); err != nil {
					t.Fatalf("no %s event on %s: %v%s", reason, p, err, logs)
				}
			}
			switch mode {
			case memusage.ModeEvict:
				for _, p := range []string{"over", "nogrant"} {
					if err := cluster.WaitPodGone(ctx, c.Client, ns, p, time.Minute); err != nil {
						t.Errorf("pod %s not evicted: %v%s", p, err, logs)
					}
				}
			case memusage.ModeKill:
				err = wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
					now := simPIDs(procs)
					return now[6144] == 0 && now[1024] == 0, nil
				})
				if err != nil {
					t.Errorf("over's and nogrant's processes still run: %v%s", simPIDs(procs), logs)
				}
			}
			// The neighbour: still running, its process alive, no event.
			if got := simPIDs(procs)[2048]; got != pids[2048] {
				t.Errorf("neighbour's process %d is gone (now %d)%s", pids[2048], got, logs)
			}
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "neighbour", metav1.GetOptions{})
			if err != nil || !cluster.PodRunning(p) {
				t.Errorf("neighbour: %v, %v; want it Running", p.Status.Phase, err)
			}
			evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "neighbour" && strings.HasPrefix(e.Reason, "GPUMemory") {
					t.Errorf("neighbour got %s: %s", e.Reason, e.Message)
				}
				if strings.HasPrefix(e.Reason, "GPUMemory") {
					t.Logf("event on %s: %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
				}
			}
		})
	}
}

// simPIDs reads the node agent's simulated NVML process file: PID by the
// memory (MiB) it uses.
func simPIDs(file string) map[uint64]uint32 {
	out := map[uint64]uint32{}
	b, err := os.ReadFile(file)
	if err != nil {
		return out
	}
	var f nvml.SimProcesses
	if json.Unmarshal(b, &f) != nil {
		return out
	}
	for _, l := range f {
		for _, p := range l {
			out[p.UsedMiB] = p.PID
		}
	}
	return out
}

// waitEvent waits for an event with this reason on the named pod.
func waitEvent(ctx context.Context, c *cluster.Cluster, ns, pod, reason string) error {
	return wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}
