package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
)

// Card-aware preemption on the live harness: kube-scheduler calls the
// extender's preempt verb (scheduler/config names it), whose victims free
// one card. Without the verb kube-scheduler chooses on node totals: the
// pods it evicts are spread over the cards, so the checks that only one
// card's pods went fail.

const (
	lowClass  = "gpushare-e2e-low"
	highClass = "gpushare-e2e-high"
)

// priorityClasses creates the low (10) and high (1000) classes once.
func priorityClasses(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for name, v := range map[string]int32{lowClass: 10, highClass: 1000} {
		_, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// classPod is a pod of class asking units GiB in container c0 under the
// named policy ("" : the extender's default, binpack).
func classPod(ns, name, class, policy string, units int64) *corev1.Pod {
	b := podtest.Make(ns, name).GPU("c0", units)
	if policy != "" {
		b.Annotation(api.DefaultNames().AnnotationPolicy(), policy)
	}
	pod := lanePod(b, registryPause)
	pod.Spec.PriorityClassName = class
	return pod
}

// createAll creates the pods and waits until each runs on node.
func createAll(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, pods ...*corev1.Pod) []*corev1.Pod {
	t.Helper()
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, waitRunning(ctx, t, c, p.Namespace, p.Name, node))
	}
	return out
}

// cardsOf returns the cards (UUIDs) the pod's record gives it, sorted.
func cardsOf(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	a, err := api.DefaultNames().AssignmentFromPod(pod)
	if err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
	var out []string
	for _, ca := range a.Containers {
		out = append(out, ca.CardUUID)
	}
	out = append(out, a.WholeCardUUIDs()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// fillSpread fills every card of node (cards of 40 GiB) with five 8 GiB
// pods of the low class, spread over the cards one after the other, and
// returns them by card.
func fillSpread(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, ns string, cards int) map[string][]*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := 0; i < 5*cards; i++ {
		pods = append(pods, classPod(ns, fmt.Sprintf("low-%02d", i), lowClass, "spread", 8))
	}
	byCard := map[string][]*corev1.Pod{}
	for _, p := range createAll(ctx, t, c, node, pods...) {
		card := cardsOf(t, p)[0]
		byCard[card] = append(byCard[card], p)
	}
	for card, ps := range byCard {
		if len(ps) != 5 {
			t.Fatalf("card %s holds %d low pods, want 5 on each card", card, len(ps))
		}
	}
	return byCard
}

// checkPreempted checks that exactly victims are gone and every pod of
// untouched still runs, the same pod, not terminating.
func checkPreempted(ctx context.Context, t *testing.T, c *cluster.Cluster, victims, untouched []*corev1.Pod) {
	t.Helper()
	for _, v := range victims {
		if err := cluster.WaitPodGone(ctx, c.Client, v.Namespace, v.Name, time.Minute); err != nil {
			t.Errorf("victim %s not gone: %v", v.Name, err)
		}
	}
	for _, p := range untouched {
		got, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("pod %s (card %v) was evicted: %v", p.Name, cardsOf(t, p), err)
		case got.UID != p.UID || got.DeletionTimestamp != nil || got.Status.Phase != corev1.PodRunning:
			t.Errorf("pod %s (card %v) was disturbed: UID %s (was %s), deleting %v, phase %s", p.Name, cardsOf(t, p), got.UID, p.UID, got.DeletionTimestamp != nil, got.Status.Phase)
		}
	}
}

// preemptorRuns creates the preemptor and waits until it runs on the
// card(s) want.
func preemptorRuns(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, pod *corev1.Pod, want []string) {
	t.Helper()
	start := time.Now()
	got := createAll(ctx, t, c, node, pod)[0]
	cards := cardsOf(t, got)
	if !slices.Equal(cards, want) {
		t.Errorf("preemptor %s runs on cards %v, want the freed %v", pod.Name, cards, want)
	}
	t.Logf("preemptor %s running on %v %v after its creation", pod.Name, cards, time.Since(start).Round(time.Millisecond))
}

func others(byCard map[string][]*corev1.Pod, except ...string) []*corev1.Pod {
	var out []*corev1.Pod
	for card, ps := range byCard {
		if !slices.Contains(except, card) {
			out = append(out, ps...)
		}
	}
	return out
}

func TestPreemptionEvictsTheFivePodsOfOneCard(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	priorityClasses(ctx, t, c)
	node, _ := gpuNode(ctx, t, c, "preempt-one", "3x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "preempt-one")
	byCard := fillSpread(ctx, t, c, node, ns, 3)

	hi := classPod(ns, "hi", highClass, "", 40)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, hi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitRunning(ctx, t, c, ns, "hi", node)
	card := cardsOf(t, got)
	if len(card) != 1 || len(byCard[card[0]]) != 5 {
		t.Fatalf("preemptor runs on %v, want one of the filled cards", card)
	}
	checkPreempted(ctx, t, c, byCard[card[0]], others(byCard, card[0]))
}

func TestPreemptionMovesToACardNoDisruptionBudgetProtects(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	priorityClasses(ctx, t, c)
	node, inv := gpuNode(ctx, t, c, "preempt-pdb", "3x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "preempt-pdb")
	byCard := fillSpread(ctx, t, c, node, ns, 3)

	// Card 0's pods, the ones chosen without a budget (the cards tie, the
	// lowest index wins), are protected: no disruption allowed.
	guarded := inv.Cards[0].UUID
	for _, p := range byCard[guarded] {
		if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"guard":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// minAvailable (not maxUnavailable): the pods have no controller.
	five := intstr.FromInt32(5)
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &five, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"guard": "yes"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guard", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.ExpectedPods == 5 && b.Status.DisruptionsAllowed == 0, nil
	}); err != nil {
		t.Fatalf("the disruption controller did not count the budget's 5 pods: %v", err)
	}

	hi := classPod(ns, "hi", highClass, "", 40)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, hi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitRunning(ctx, t, c, ns, "hi", node)
	card := cardsOf(t, got)
	if len(card) != 1 || card[0] == guarded || len(byCard[card[0]]) != 5 {
		t.Fatalf("preemptor runs on %v, want a filled card other than the guarded %s", card, guarded)
	}
	checkPreempted(ctx, t, c, byCard[card[0]], others(byCard, card[0]))
}

func TestPreemptionForAWholeCardEvictsOnlyThatCardsHolder(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	priorityClasses(ctx, t, c)
	node, _ := gpuNode(ctx, t, c, "preempt-whole", "3x40GiB:NVIDIA-A100")
	waitWholeAllocatable(ctx, t, c, node, 3)
	ns := testNamespace(ctx, t, c, "preempt-whole")
	// one holds one card; two, started later (less important to
	// kube-scheduler), holds the other two. On node totals kube-scheduler
	// evicts two, freeing two cards for a pod that takes one.
	withClass := func(p *corev1.Pod, class string) *corev1.Pod { p.Spec.PriorityClassName = class; return p }
	one := createAll(ctx, t, c, node, withClass(wholePod(ns, "one", 1), lowClass))[0]
	two := createAll(ctx, t, c, node, withClass(wholePod(ns, "two", 2), lowClass))[0]

	preemptorRuns(ctx, t, c, node, withClass(wholePod(ns, "hi", 1), highClass), cardsOf(t, one))
	checkPreempted(ctx, t, c, []*corev1.Pod{one}, []*corev1.Pod{two})
}

func TestPreemptionThatCannotFreeACardEvictsNothingAndSaysWhy(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	priorityClasses(ctx, t, c)
	node, _ := gpuNode(ctx, t, c, "preempt-none", "2x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "preempt-none")
	// Each card: one pod of the preemptor's priority and four low ones.
	// On node totals evicting five low pods frees 40 GiB; on no card does.
	// The peers run first, one per card (spread); created with the low pods,
	// both could land on one card before the extender binds them in order,
	// leaving five low pods on the other: a card preemption may free.
	peers := createAll(ctx, t, c, node, classPod(ns, "peer-0", highClass, "spread", 8), classPod(ns, "peer-1", highClass, "spread", 8))
	if a, b := cardsOf(t, peers[0]), cardsOf(t, peers[1]); slices.Equal(a, b) {
		t.Fatalf("both peers on card %v, want one per card (spread)", a)
	}
	var lows []*corev1.Pod
	for i := 0; i < 8; i++ {
		lows = append(lows, classPod(ns, fmt.Sprintf("low-%d", i), lowClass, "spread", 8))
	}
	running := append(peers, createAll(ctx, t, c, node, lows...)...)

	hi := classPod(ns, "hi", highClass, "", 40)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, hi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-scheduler's preemption has run once the failure is reported;
	// on node totals it evicts five low pods (two cards' worth of nothing).
	waitSchedulingFailure(ctx, t, c, ns, "hi", "0/1 nodes are available")
	checkPreempted(ctx, t, c, nil, running)
	var msg string
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hi,reason=PreemptionNotHelpful"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[0].Message
		return true, nil
	}); err != nil {
		t.Fatalf("no PreemptionNotHelpful event on the preemptor: %v\nextender log: %s", err, extender.LogPath)
	}
	t.Logf("hi: %s", msg)
	if !strings.Contains(msg, "evicting every pod of priority below 1000 from one of node preempt-none's cards leaves no room") {
		t.Errorf("event says %q, want why no card can be freed", msg)
	}
	if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, "hi", metav1.GetOptions{}); err != nil || got.Spec.NodeName != "" {
		t.Errorf("preemptor bound to %q (%v), want Pending", got.Spec.NodeName, err)
	}
}
