package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
)

// Issue 15, whole cards, on the live harness (real kubelet device manager,
// real device plugin, kube-scheduler with the extender): a whole-card pod
// gets N exclusive cards, each mounted; a shared pod never lands on them, a
// whole-card pod never lands on a card with shared memory; a device plugin
// restart keeps both kubelet accounts right; kubectl inspect gpushare -o json
// agrees.
func TestWholeCardsAreExclusiveOfSharedMemory(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	inspector := productBinary(t, "kubectl-inspect-gpushare", "inspector")
	const nodeName = "whole-node"
	node, inv := gpuNode(ctx, t, c, nodeName, "3x40GiB:NVIDIA-A100")
	waitWholeAllocatable(ctx, t, c, node, 3)
	ns := testNamespace(ctx, t, c, "whole")

	s1 := runPod(ctx, t, c, gpuPod(ns, "s1", 10), node)
	shared := checkCards(ctx, t, c, s1).Containers[0].CardUUID

	w1 := runPod(ctx, t, c, wholePod(ns, "w1", 2), node)
	w1Cards := checkWholeCards(ctx, t, c, w1, 2)
	if slices.Contains(w1Cards, shared) {
		t.Errorf("w1 got card %s whole, which holds s1's shared memory", shared)
	}
	// The only card not held whole is the shared one: s2 goes there.
	s2 := runPod(ctx, t, c, gpuPod(ns, "s2", 20), node)
	if got := checkCards(ctx, t, c, s2).Containers[0].CardUUID; got != shared {
		t.Errorf("s2 got card %s, want %s (the others are held whole)", got, shared)
	}
	// The kubelet's accounts: the shared card is not allocatable whole, and
	// w1's cards offer no gpu-mem.
	waitAllocatable(ctx, t, c, node, api.DefaultNames().WholeResourceName(), 2)
	waitAllocatable(ctx, t, c, node, api.DefaultNames().ResourceName(), 40)

	// Neither kind fits any more: a whole card and 15 GiB stay Pending.
	for _, p := range []*corev1.Pod{wholePod(ns, "w2", 1), gpuPod(ns, "s3", 15)} {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFailedScheduling(ctx, t, c, ns, p.Name)
		if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.Spec.NodeName != "" {
			t.Errorf("pod %s bound to %q (%v), want Pending", p.Name, got.Spec.NodeName, err)
		}
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}

	// Device plugin restart: both resources register again, running pods
	// keep their cards, and the accounts are as before.
	regs := node.Registrations()
	old := node.PluginPID()
	if err := syscall.Kill(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(context.Context) (bool, error) {
		pid := node.PluginPID()
		return pid != 0 && pid != old && node.Registrations() >= regs+2, nil
	}); err != nil {
		t.Fatalf("plugin not restarted and registered twice again: %v (registrations %d, before %d)", err, node.Registrations(), regs)
	}
	waitAllocatable(ctx, t, c, node, api.DefaultNames().WholeResourceName(), 2)
	waitAllocatable(ctx, t, c, node, api.DefaultNames().ResourceName(), 40)
	for _, p := range []*corev1.Pod{w1, s1, s2} {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			t.Errorf("%s after the plugin restart: %v %v", p.Name, got.Status.Phase, err)
		}
	}
	if got := checkWholeCards(ctx, t, c, w1, 2); !slices.Equal(got, w1Cards) {
		t.Errorf("w1's cards after the plugin restart: %v, before %v", got, w1Cards)
	}

	// Releasing the shared card makes it available whole: w3 gets it, not
	// one of w1's.
	for _, p := range []string{"s1", "s2"} {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitPodGone(ctx, c.Client, ns, p, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	waitAllocatable(ctx, t, c, node, api.DefaultNames().WholeResourceName(), 3)
	w3 := runPod(ctx, t, c, wholePod(ns, "w3", 1), node)
	if got := checkWholeCards(ctx, t, c, w3, 1); !slices.Equal(got, []string{shared}) {
		t.Errorf("w3 got %v, want the released card %s", got, shared)
	}
	waitAllocatable(ctx, t, c, node, api.DefaultNames().ResourceName(), 0)

	// The inspector agrees: every card given whole, fully allocated, held by
	// the right pod.
	out, err := exec.CommandContext(ctx, inspector, "--kubeconfig", c.Kubeconfig, "-o", "json", nodeName).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-inspect-gpushare -o json: %v\n%s", err, out)
	}
	var view struct {
		Nodes []struct {
			Name  string `json:"name"`
			Cards []struct {
				UUID      string `json:"uuid"`
				Whole     bool   `json:"whole"`
				Allocated int64  `json:"allocated"`
				Total     int64  `json:"total"`
				Pods      []struct {
					Name  string `json:"name"`
					Whole bool   `json:"whole"`
				} `json:"pods"`
			} `json:"cards"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out, &view); err != nil || len(view.Nodes) != 1 {
		t.Fatalf("inspector JSON: %v\n%s", err, out)
	}
	holder := map[string]string{shared: "w3"}
	for _, u := range w1Cards {
		holder[u] = "w1"
	}
	for _, card := range view.Nodes[0].Cards {
		want, _ := inv.CardByUUID(card.UUID)
		if !card.Whole || card.Allocated != want.Units || card.Total != want.Units || len(card.Pods) != 1 || !card.Pods[0].Whole || card.Pods[0].Name != holder[card.UUID] {
			t.Errorf("inspector card %s: %+v, want held whole by %s", card.UUID, card, holder[card.UUID])
		}
	}
}

// wholePod builds a pod scheduled by the extender's profile with one
// container "c0" asking for n whole cards.
func wholePod(ns, name string, n int64) *corev1.Pod {
	return lanePod(podtest.Make(ns, name).Whole("c0", n), registryPause)
}

// checkWholeCards waits (within recordSettle) until the pod's record is
// Allocated and gives container c0 exactly the cards the kubelet handed it,
// each mounted under the NVIDIA volume root; it returns them, sorted.
func checkWholeCards(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, n int) []string {
	t.Helper()
	var problems []string
	var cards []string
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, recordSettle, true, func(ctx context.Context) (bool, error) {
		fresh, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		problems = nil
		a, err := api.DefaultNames().AssignmentFromPod(fresh)
		if err != nil {
			problems = append(problems, err.Error())
			return false, nil
		}
		w, ok := a.WholeCard("c0")
		if !ok || w.Cards() != n || a.Phase != api.PhaseAllocated || len(a.Containers) != 0 {
			problems = append(problems, fmt.Sprintf("record %+v, want %d whole cards for c0, Allocated", a, n))
			return false, nil
		}
		cards = slices.Sorted(slices.Values(w.CardUUIDs))
		rec := containerRecord(t, fresh, "c0")
		ids := slices.Sorted(slices.Values(rec.DeviceIDs[string(api.DefaultNames().WholeResourceName())]))
		if !slices.Equal(ids, cards) {
			problems = append(problems, fmt.Sprintf("kubelet gave %v, record says %v", ids, cards))
		}
		if len(rec.DeviceIDs[string(api.DefaultNames().ResourceName())]) != 0 {
			problems = append(problems, fmt.Sprintf("container also holds gpu-mem units %v", rec.DeviceIDs[string(api.DefaultNames().ResourceName())]))
		}
		var mounts []string
		for _, m := range rec.Mounts {
			if strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/") {
				mounts = append(mounts, strings.TrimPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/"))
			}
		}
		if slices.Sort(mounts); !slices.Equal(mounts, cards) {
			problems = append(problems, fmt.Sprintf("card mounts %v, want one per card %v", mounts, cards))
		}
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v (still after %v)", pod.Name, problems, recordSettle)
	}
	return cards
}

// waitAllocatable waits until the node's allocatable res is want.
func waitAllocatable(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, res corev1.ResourceName, want int64) {
	t.Helper()
	var got resource.Quantity
	_, err := cluster.WaitNode(ctx, c.Client, node.Opts.Name, time.Minute, fmt.Sprintf("allocatable %s = %d", res, want), func(n *corev1.Node) bool {
		got = n.Status.Allocatable[res]
		return got.Value() == want
	})
	if err != nil {
		t.Fatalf("%v (last %s)\nagent log: %s", err, got.String(), node.LogFile())
	}
}

// waitWholeAllocatable waits until the node offers want whole cards.
func waitWholeAllocatable(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, want int64) {
	t.Helper()
	waitAllocatable(ctx, t, c, node, api.DefaultNames().WholeResourceName(), want)
}

// waitFailedScheduling waits for kube-scheduler's FailedScheduling event on
// the pod.
func waitFailedScheduling(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedScheduling"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for %s/%s: %v", ns, name, err)
	}
	t.Logf("pod %s pending: %s", name, msg)
}
