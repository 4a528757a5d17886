package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Issue 15, choosing cards. Two nodes of different simulated models
// (ch-h100: two H100 80 GiB; ch-mix: two A100 40 GiB and an L4 24 GiB)
// behind the real kube-scheduler and extender (started with
// --allowed-policies binpack,spread):
//   - card-models, exclude-card-models and card-uuids put each pod on a card
//     it chose, and the kubelet's device manager hands it exactly that card;
//   - a model no node has, and a policy the operator does not allow, leave
//     the pod Pending with the extender's reason in FailedScheduling, naming
//     the models there are and the policies allowed;
//   - two pods naming spread land on different cards where two binpack pods
//     stack on one;
//   - `kubectl inspect gpushare -o json` agrees with the records, card by card.
func TestPodsChooseTheirCardsAndPolicy(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	_, h100Inv := gpuNode(ctx, t, c, "ch-h100", "2x80GiB:NVIDIA-H100")
	_, mixInv := gpuNode(ctx, t, c, "ch-mix", "2x40GiB:NVIDIA-A100,1x24GiB:NVIDIA-L4")
	ns := testNamespace(ctx, t, c, "choose")
	invs := map[string]api.Inventory{"ch-h100": h100Inv, "ch-mix": mixInv}
	annotated := func(name string, units int64, ann map[string]string) *corev1.Pod {
		pod := gpuPod(ns, name, units)
		pod.Annotations = ann
		return pod
	}
	// run creates the pod, waits until it runs, checks its containers got
	// the recorded card, and returns that card.
	run := func(pod *corev1.Pod) (string, api.Card) {
		t.Helper()
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := cluster.WaitPod(ctx, c.Client, ns, pod.Name, 2*time.Minute, "Running", cluster.PodRunning)
		if err != nil {
			t.Fatalf("%v\nextender log: %s", err, extender.LogPath)
		}
		asg := checkCards(ctx, t, c, got)
		card, ok := invs[got.Spec.NodeName].CardByUUID(asg.Containers[0].CardUUID)
		if !ok {
			t.Fatalf("pod %s: card %s is not in %s's inventory", pod.Name, asg.Containers[0].CardUUID, got.Spec.NodeName)
		}
		t.Logf("pod %s %v -> %s card %d (%s)", pod.Name, pod.Annotations, got.Spec.NodeName, card.Index, card.Model)
		return got.Spec.NodeName, card
	}

	// Model selection.
	if node, card := run(annotated("a100", 8, map[string]string{api.DefaultNames().AnnotationCardModels(): "A100"})); node != "ch-mix" || card.Model != "NVIDIA A100" {
		t.Errorf("card-models A100: %s card %d (%s), want an A100 on ch-mix", node, card.Index, card.Model)
	}
	// Binpack alone would choose the smallest card that fits, the L4.
	if node, card := run(annotated("not-l4", 8, map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "L4|H100"})); node != "ch-mix" || card.Model != "NVIDIA A100" {
		t.Errorf("exclude-card-models L4|H100: %s card %d (%s), want an A100 on ch-mix", node, card.Index, card.Model)
	}
	want, _ := h100Inv.Card(1)
	if node, card := run(annotated("by-uuid", 8, map[string]string{api.DefaultNames().AnnotationCardUUIDs(): want.UUID})); node != "ch-h100" || card.UUID != want.UUID {
		t.Errorf("card-uuids %s: %s card %s, want exactly that card", want.UUID, node, card.UUID)
	}

	// A model nowhere: Pending, and the reason lists what there is.
	nowhere := annotated("b200", 8, map[string]string{api.DefaultNames().AnnotationCardModels(): "B200"})
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, nowhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSchedulingFailure(ctx, t, c, ns, "b200",
		`no card of model "B200" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA H100`,
		`models here: NVIDIA A100, NVIDIA L4`)

	// A policy the operator does not allow: Pending, naming the allowed ones.
	fgd := annotated("fgd", 8, map[string]string{api.DefaultNames().AnnotationPolicy(): "fgd"})
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, fgd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSchedulingFailure(ctx, t, c, ns, "fgd", `names "fgd", which this cluster's operator does not allow (the extender's --allowed-policies): allowed here are binpack, spread`)

	// Per-pod spread against binpack, on the H100 node's cards (card 1
	// holds the by-uuid pod's 8 GiB, card 0 is empty): spread takes the
	// emptiest card for each pod, so the two spread pods land on different
	// cards; binpack takes the fullest card that fits, so the two binpack
	// pods stack on one.
	h100 := map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}
	spread := map[string]string{api.DefaultNames().AnnotationCardModels(): "H100", api.DefaultNames().AnnotationPolicy(): "spread"}
	_, s1 := run(annotated("spread-1", 10, spread))
	_, s2 := run(annotated("spread-2", 10, spread))
	if s1.UUID == s2.UUID {
		t.Errorf("two spread pods share card %d; spread puts each on the emptiest card", s1.Index)
	}
	_, b1 := run(annotated("binpack-1", 4, h100))
	_, b2 := run(annotated("binpack-2", 4, h100))
	if b1.UUID != b2.UUID {
		t.Errorf("two binpack pods on cards %d and %d; binpack stacks them on the fullest card", b1.Index, b2.Index)
	}

	for _, p := range []string{"b200", "fgd"} {
		if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{}); err != nil || got.Spec.NodeName != "" {
			t.Errorf("pod %s: bound to %q (%v), want Pending", p, got.Spec.NodeName, err)
		}
	}

	// The inspector agrees with the records, from the API and from the
	// extender.
	used := map[string]int64{}
	for name, inv := range invs {
		for uuid, u := range checkCapacity(ctx, t, c, name, inv) {
			used[uuid] += u
		}
	}
	inspector := productBinary(t, "kubectl-inspect-gpushare", "inspector")
	for _, args := range [][]string{{"-o", "json"}, {"--from-extender", fmt.Sprintf("http://127.0.0.1:%d", extenderPort), "-o", "json"}} {
		out, err := exec.CommandContext(ctx, inspector, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl-inspect-gpushare %v: %v\n%s", args, err, out)
		}
		var view struct {
			Nodes []struct {
				Name  string `json:"name"`
				Cards []struct {
					UUID      string `json:"uuid"`
					Model     string `json:"model"`
					Allocated int64  `json:"allocated"`
				} `json:"cards"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(out, &view); err != nil {
			t.Fatalf("inspector JSON (%v): %v", args, err)
		}
		seen := 0
		for _, n := range view.Nodes {
			inv, ok := invs[n.Name]
			if !ok {
				continue
			}
			for _, card := range n.Cards {
				seen++
				ic, _ := inv.CardByUUID(card.UUID)
				if card.Allocated != used[card.UUID] || card.Model != ic.Model {
					t.Errorf("inspector %v: %s card %s (%s) %d allocated, records say %d (%s)", args, n.Name, card.UUID, card.Model, card.Allocated, used[card.UUID], ic.Model)
				}
			}
		}
		if seen != len(h100Inv.Cards)+len(mixInv.Cards) {
			t.Errorf("inspector %v shows %d cards of the two nodes, want %d", args, seen, len(h100Inv.Cards)+len(mixInv.Cards))
		}
	}
}

// waitSchedulingFailure waits until the pod's FailedScheduling events carry
// every part in want (kube-scheduler joins the nodes' reasons in one message).
func waitSchedulingFailure(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, pod string, want ...string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": pod, "reason": "FailedScheduling"}.String()})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			last = ev.Message
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(ev.Message, w)
			}
			if ok {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: no FailedScheduling event containing %q; last: %q\nextender log: %s", pod, want, last, extender.LogPath)
	}
	t.Logf("pod %s: %s", pod, last)
}
