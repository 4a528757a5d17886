package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/test/cluster"
)

// A whole-card preemptor on the live harness, through kube-scheduler's
// preemption and the extender's preempt verb: two cards held whole by
// low-priority pods and a third holding a low-priority share. A
// high-priority pod asking for one whole card evicts exactly one of the
// whole-card holders and runs on the card it freed; the other holder and
// the share on the third card are untouched. (A whole-card preemptor whose
// only possible victims hold shares gets no candidate from kube-scheduler's
// own dry run, which counts the kubelet's allocatable: docs/design.md,
// "Preemption".)
func TestPreemptionFreesWholeCards(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	node, _ := gpuNode(ctx, t, c, "preempt-whole", "3x40GiB:NVIDIA-A100", withLabels("gpushare.example.com/enabled=true,e2e-preempt-whole=yes"))
	ns := testNamespace(ctx, t, c, "preempt-whole")
	low := priorityClass(ctx, t, c, "e2e-preempt-whole-low", 0)
	high := priorityClass(ctx, t, c, "e2e-preempt-whole-high", 1000)
	pin := func(p *corev1.Pod, class string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"e2e-preempt-whole": "yes"}
		p.Spec.PriorityClassName = class
		return p
	}
	cardOf := map[string]string{}
	share := runPod(ctx, t, c, pin(gpuPod(ns, "low-share", 8), low), node)
	cardOf[share.Name] = checkCards(ctx, t, c, share).Containers[0].CardUUID
	for i := range 2 {
		p := runPod(ctx, t, c, pin(wholePod(ns, fmt.Sprintf("low-whole-%d", i), 1), low), node)
		cards := checkWholeCards(ctx, t, c, p, 1)
		cardOf[p.Name] = cards[0]
		if cards[0] == cardOf[share.Name] {
			t.Fatalf("%s holds card %s whole, which holds a share", p.Name, cards[0])
		}
	}
	// The node's cards are all taken: a high-priority whole-card pod.
	big := runPod(ctx, t, c, pin(wholePod(ns, "high-whole", 1), high), node)
	got := checkWholeCards(ctx, t, c, big, 1)[0]
	var victim string
	for name, card := range cardOf {
		if card == got {
			victim = name
		}
	}
	if victim == "" || victim == share.Name {
		t.Fatalf("high-whole runs on card %s, held before by %q; want a card a low-priority pod held whole (cards: %v)", got, victim, cardOf)
	}
	gone := waitEvicted(ctx, t, c, ns, cardOf, []string{victim})
	if slices.Contains(gone, share.Name) {
		t.Errorf("the share on another card was evicted")
	}
	if _, err := cluster.WaitPod(ctx, c.Client, ns, "high-whole", 5*time.Second, "Running", cluster.PodRunning); err != nil {
		t.Error(err)
	}
}
