package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	memusage "github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// The default enforcement (evict) is not a tenant's to switch off. On one
// simulated 16 GiB card, each pod granted 4 GiB uses more: "budget" is
// covered by a PodDisruptionBudget with maxUnavailable 0 (every eviction a
// 429), "trap" asks for a day of termination grace and its process ignores
// SIGTERM (the node agent, like the kubelet, sends SIGTERM and SIGKILLs only
// at the grace's end). Each loses the memory within the stated window
// (--memory-grace, then at most --memory-evict-grace plus two sample
// intervals), with a Warning Event that says why.
func TestMemoryEnforcementCannotBeOptedOut(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const name = "mem-optout"
	procs := filepath.Join(c.NodeStateDir(name), nodeagent.GPUProcessesFileName)
	node, _ := gpuNode(ctx, t, c, name, "1x16GiB", withLabels(api.LabelEnabled+"=true,e2e-memory=optout"),
		withPluginArgs("--memory-enforcement=evict", "--memory-sample-interval=250ms", "--memory-grace=2s", "--memory-evict-grace=3s", "--nvml-sim-processes="+procs))
	ns := testNamespace(ctx, t, c, name)
	logs := "\nagent log: " + node.LogFile() + "\nplugin log: " + filepath.Join(c.NodeStateDir(name), "plugin.log")

	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "budget", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "budget"}}},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	use := func(p *corev1.Pod, v string) *corev1.Pod {
		p.Annotations = map[string]string{api.DefaultNames().AnnotationSimulatedGPUUse(): v}
		p.Spec.NodeSelector = map[string]string{"e2e-memory": "optout"}
		return p
	}
	budget := use(gpuPod(ns, "budget", 4), "c0=6144")
	budget.Labels = map[string]string{"app": "budget"}
	trap := use(gpuPod(ns, "trap", 4), "c0=5120+ignore-sigterm")
	trap.Spec.TerminationGracePeriodSeconds = ptr.To[int64](86400)
	runPod(ctx, t, c, budget, node)
	runPod(ctx, t, c, trap, node)
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
		p := simPIDs(procs)
		return p[6144] != 0 && p[5120] != 0, nil
	})
	if err != nil {
		t.Fatalf("the agent's process file lists %v, want both processes%s", simPIDs(procs), logs)
	}
	start := time.Now()

	// Over from the start: acted on after 2 s; the trap's eviction grants 3 s
	// (not a day), and a kill backs it 3.5 s after the eviction. 30 s
	// leaves room for a slow machine, not for a day of grace or a retry
	// without end.
	err = wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
		p := simPIDs(procs)
		return p[6144] == 0 && p[5120] == 0, nil
	})
	if err != nil {
		t.Fatalf("30 s on, processes still hold the memory (MiB → PID): %v%s", simPIDs(procs), logs)
	}
	t.Logf("both over-users lost the memory %v after their processes were seen", time.Since(start).Round(time.Second))
	if err := waitEvent(ctx, c, ns, "budget", memusage.ReasonKilled); err != nil {
		t.Errorf("no %s event on budget (the eviction refused by its budget): %v%s", memusage.ReasonKilled, err, logs)
	}
	if err := waitEvent(ctx, c, ns, "trap", memusage.ReasonEvicted); err != nil {
		t.Errorf("no %s event on trap: %v%s", memusage.ReasonEvicted, err, logs)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, ns, "trap", 30*time.Second); err != nil {
		t.Errorf("trap, evicted with a bounded grace, is not gone: %v%s", err, logs)
	}
	evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == "budget" && e.Reason == memusage.ReasonKilled {
			t.Logf("event on budget: %s", e.Message)
			if !strings.Contains(e.Message, "PodDisruptionBudget") || !strings.Contains(e.Message, "request more GPU memory") {
				t.Errorf("budget's event does not say why and what to do: %s", e.Message)
			}
		}
	}
}
