package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	memusage "github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// Memory enforcement of claims, once per mode that acts on the pod. On a
// DRA node with one 16Gi card, "over" and "within" each have a claim of
// 4Gi on it; over's container uses 6Gi, within's 2Gi (real processes in
// kubelet-shaped cgroups whose use the simulated NVML reports). The driver
// measures each container against what its claim consumed: report: a
// Warning Event on over; evict: over evicted. Within is never touched; its
// claim's memory is the grant the driver reports.
func TestDRAClaimOverItsMemoryIsEnforced(t *testing.T) {
	c := setup(t)
	needRoot(t)
	ctx0, cancel0 := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel0()
	ns0 := testNamespace(ctx0, t, c, "dra-mem")
	applyDeviceClass(ctx0, t, c, ns0)
	for _, mode := range []memusage.Mode{memusage.ModeReport, memusage.ModeEvict} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx0, 2*time.Minute)
			defer cancel()
			name := "dra-mem-" + string(mode)
			procs := filepath.Join(c.NodeStateDir(name), nodeagent.GPUProcessesFileName)
			node, _ := draNode(ctx, t, c, name, "1x16GiB",
				"--memory-enforcement="+string(mode), "--memory-sample-interval=250ms", "--memory-grace=2s", "--nvml-sim-processes="+procs)
			ns := testNamespace(ctx, t, c, name)
			logs := "\nagent log: " + node.LogFile() + "\nplugin log: " + filepath.Join(c.NodeStateDir(name), "plugin.log")
			for pod, use := range map[string]string{"over": "c=6144@0", "within": "c=2048@0"} {
				if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, pod, "4Gi"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				p := claimPod(ns, pod, pod, name)
				p.Annotations = map[string]string{api.DefaultNames().AnnotationSimulatedGPUUse(): use}
				runPod(ctx, t, c, p, node)
			}
			if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
				return len(simPIDs(procs)) == 2, nil
			}); err != nil {
				t.Fatalf("the agent's process file lists %v, want two processes%s", simPIDs(procs), logs)
			}
			within := simPIDs(procs)[2048]

			reason := map[memusage.Mode]string{memusage.ModeReport: memusage.ReasonOverGrant, memusage.ModeEvict: memusage.ReasonEvicted}[mode]
			if err := waitEvent(ctx, c, ns, "over", reason); err != nil {
				t.Fatalf("no %s event on over: %v%s", reason, err, logs)
			}
			if mode == memusage.ModeEvict {
				if err := cluster.WaitPodGone(ctx, c.Client, ns, "over", time.Minute); err != nil {
					t.Errorf("over not evicted: %v%s", err, logs)
				}
			}
			if got := simPIDs(procs)[2048]; got != within {
				t.Errorf("within's process %d is gone (now %d)%s", within, got, logs)
			}
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "within", metav1.GetOptions{})
			if err != nil || !cluster.PodRunning(p) {
				t.Errorf("within: %v, %v; want it Running", p.Status.Phase, err)
			}
			evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if !strings.HasPrefix(e.Reason, "GPUMemory") {
					continue
				}
				t.Logf("event on %s: %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
				if e.InvolvedObject.Name == "within" {
					t.Errorf("within got %s: %s", e.Reason, e.Message)
				}
				if e.InvolvedObject.Name == "over" && !strings.Contains(e.Message, "4Gi") && !strings.Contains(e.Message, "4 GiB") && !strings.Contains(e.Message, "4096") {
					t.Errorf("over's event %q does not name its 4Gi claim's grant", e.Message)
				}
			}
		})
	}
}
