package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Where the admission policies are not installed (this namespace has none),
// an admin — or a tenant — can remove or garble a running pod's record. The
// extender must not forget the units the kubelet still holds: it keeps
// counting the last valid record (state "remembered" at /inspect), so a new
// pod does not land on the full card; and the device plugin rewrites the
// record from the kubelet's account (PodResources) within its reconcile
// interval. The plugin is paused (SIGSTOP) while the extender is checked, so
// that its repair cannot come first; once resumed, it repairs.
func TestLostRecordIsStillCountedAndRepairedFromTheKubeletsAccount(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const name = "repair-node"
	node, inv := gpuNode(ctx, t, c, name, "1x24GiB:NVIDIA-L4", withPluginArgs("--reconcile-interval=3s"))
	ns := testNamespace(ctx, t, c, "repair")
	onNode := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{name}}}}}}}}
		return p
	}
	full := runPod(ctx, t, c, onNode(gpuPod(ns, "full", 24)), node)
	settled := checkCards(ctx, t, c, full)

	for i, damage := range []struct {
		what  string
		value any // the annotation's new value; nil removes it
	}{
		{"removed", nil},
		{"garbled", `{"version":1,"podUID":`},
	} {
		pid := node.PluginPID()
		if pid == 0 {
			t.Fatal("no device plugin PID")
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		t.Cleanup(resume)

		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.DefaultNames().AnnotationAssignment(): damage.value}}})
		if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, "full", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("record %s: %v", damage.what, err)
		}
		// The extender still counts the 24 units, remembered.
		var seen []api.ExtenderPod
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			seen = extenderPods(ctx, t, name, full.UID)
			return len(seen) == 1 && seen[0].State == api.ExtenderPodRemembered && seen[0].Units == 24, nil
		}); err != nil {
			t.Fatalf("record %s: the extender's /inspect shows %+v for the pod, want its 24 units remembered", damage.what, seen)
		}
		// A new pod finds no room on the node.
		next := fmt.Sprintf("next-%d", i)
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, onNode(gpuPod(ns, next, 8)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": next, "reason": "FailedScheduling"}.String()})
			return err == nil && len(evs.Items) > 0, nil
		}); err != nil {
			t.Fatalf("record %s: pod %s never reported FailedScheduling: %v", damage.what, next, err)
		}
		if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, next, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("record %s: pod %s was bound to %q: the extender forgot units the kubelet holds (%v)", damage.what, next, p.Spec.NodeName, err)
		}
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, next, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		// Resumed, the plugin rewrites the record from the kubelet's
		// account within its reconcile interval (3 s).
		resume()
		start := time.Now()
		var got *corev1.Pod
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = c.Client.CoreV1().Pods(ns).Get(ctx, "full", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			_, problems := cardProblems(t, api.DefaultNames(), got)
			return len(problems) == 0, nil
		}); err != nil {
			_, problems := cardProblems(t, api.DefaultNames(), got)
			t.Fatalf("record %s: not repaired from the kubelet's account within 30 s: %v\nplugin log: %s", damage.what, problems, filepath.Join(node.Opts.StateDir, "plugin.log"))
		}
		repaired := checkCards(ctx, t, c, got)
		if repaired.Containers[0].CardUUID != settled.Containers[0].CardUUID || repaired.Containers[0].CardUUID != inv.Cards[0].UUID {
			t.Errorf("record %s: repaired to card %s, the kubelet gave %s", damage.what, repaired.Containers[0].CardUUID, settled.Containers[0].CardUUID)
		}
		t.Logf("record %s: repaired %v after the plugin resumed", damage.what, time.Since(start).Round(100*time.Millisecond))
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			seen = extenderPods(ctx, t, name, full.UID)
			return len(seen) == 1 && seen[0].State == api.ExtenderPodConfirmed && seen[0].Units == 24, nil
		}); err != nil {
			t.Fatalf("record %s: after the repair the extender shows %+v, want the pod confirmed", damage.what, seen)
		}
	}
}

// extenderPods are the entries for pod uid on node in the main extender's
// GET /inspect/{node}.
func extenderPods(ctx context.Context, t *testing.T, node string, uid types.UID) []api.ExtenderPod {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/inspect/%s", extenderPort, node), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var n api.ExtenderNode
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&n) != nil {
		return nil
	}
	var out []api.ExtenderPod
	for _, card := range n.Cards {
		for _, p := range card.Pods {
			if p.UID == uid {
				out = append(out, p)
			}
		}
	}
	return out
}
