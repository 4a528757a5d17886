package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Card-aware preemption on the live harness (kube-scheduler's own
// preemption with the extender's preempt verb): three cards of 40 GiB full
// of low-priority 8 GiB pods, five a card. A high-priority 40 GiB pod evicts
// exactly the five pods of one card and runs there, the ten others
// untouched; with a PodDisruptionBudget on one of the two cards left, a
// second one evicts the other card's; a third then has only the protected
// card left and evicts it (the violation unavoidable); a fourth high-priority pod, which no eviction of
// lower-priority pods can help, stays Pending with the reason; and a pod
// that node totals say preemption would help, but no card, evicts nobody.
func TestPreemptionFreesOneCard(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	node, _ := gpuNode(ctx, t, c, "preempt-node", "3x40GiB:NVIDIA-A100", withLabels("gpushare.example.com/enabled=true,e2e-preempt=yes"))
	ns := testNamespace(ctx, t, c, "preempt")
	low := priorityClass(ctx, t, c, "e2e-preempt-low", 0)
	high := priorityClass(ctx, t, c, "e2e-preempt-high", 1000)

	pin := func(p *corev1.Pod, class string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"e2e-preempt": "yes"}
		p.Spec.PriorityClassName = class
		return p
	}
	// card of each low pod, by name.
	cardOf := map[string]string{}
	// Placed by spread, one card after the other: the pods started last,
	// whom kube-scheduler's own choice on node totals evicts first, are on
	// different cards.
	for i := 0; i < 15; i++ {
		lp := pin(gpuPod(ns, fmt.Sprintf("low-%02d", i), 8), low)
		lp.Annotations = map[string]string{api.DefaultNames().AnnotationPolicy(): "spread"}
		p := runPod(ctx, t, c, lp, node)
		cardOf[p.Name] = checkCards(ctx, t, c, p).Containers[0].CardUUID
	}
	byCard := map[string][]string{}
	for name, card := range cardOf {
		byCard[card] = append(byCard[card], name)
	}
	if len(byCard) != 3 {
		t.Fatalf("low pods on %d cards, want 3 full cards: %v", len(byCard), byCard)
	}
	// Label each low pod with its card, for the budget below.
	for name, card := range cardOf {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"card":%q}}}`, strings.ToLower(card))
		if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A 40 GiB pod: exactly one card's five pods go.
	big := runPod(ctx, t, c, pin(gpuPod(ns, "big", 40), high), node)
	bigCard := checkCards(ctx, t, c, big).Containers[0].CardUUID
	gone := waitEvicted(ctx, t, c, ns, cardOf, byCard[bigCard])
	t.Logf("big on %s evicted %v", bigCard, gone)

	// A budget protects one of the two cards left: the next 40 GiB pod
	// evicts the other card's pods.
	var left []string
	for card := range byCard {
		if card != bigCard {
			left = append(left, card)
		}
	}
	slices.Sort(left)
	protected, open := left[0], left[1]
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 0},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"card": strings.ToLower(protected)}},
		},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The extender follows budgets through its informer: give it a moment
	// to see this one, as kube-scheduler's own informer does.
	waitPDBSeen(ctx, t, c, ns)
	big2 := runPod(ctx, t, c, pin(gpuPod(ns, "big2", 40), high), node)
	if got := checkCards(ctx, t, c, big2).Containers[0].CardUUID; got != open {
		t.Errorf("big2 on card %s, want %s, the card no budget protects", got, open)
	}
	waitEvicted(ctx, t, c, ns, cardOf, append(append([]string{}, byCard[bigCard]...), byCard[open]...))

	// Only the protected card's pods are of lower priority now: the
	// violation is unavoidable, and kube-scheduler makes it.
	big3 := runPod(ctx, t, c, pin(gpuPod(ns, "big3", 40), high), node)
	if got := checkCards(ctx, t, c, big3).Containers[0].CardUUID; got != protected {
		t.Errorf("big3 on card %s, want %s, the last card with lower-priority pods", got, protected)
	}
	waitEvicted(ctx, t, c, ns, cardOf, slices.Collect(maps.Keys(cardOf)))

	// Nothing of lower priority is left: a fourth 40 GiB pod stays Pending.
	p4 := pin(gpuPod(ns, "big4", 40), high)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p4, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFailedScheduling(ctx, t, c, ns, "big4")
	msg := failedSchedulingMessage(ctx, t, c, ns, "big4")
	if !strings.Contains(msg, "No preemption victims found") {
		t.Errorf("big4's reason %q: want kube-scheduler's preemption verdict", msg)
	}
	for _, name := range []string{"big", "big2", "big3"} {
		if _, err := cluster.WaitPod(ctx, c.Client, ns, name, 5*time.Second, "Running", cluster.PodRunning); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Enough on the node's totals, not on any card: each card holds a
	// high-priority 32 GiB pod and a low-priority 8 GiB one. A 20 GiB pod
	// would free 24 GiB by node totals, never 20 on one card: nobody is
	// evicted and it stays Pending.
	for _, name := range []string{"big4", "big", "big2", "big3"} {
		deletePodNow(ctx, t, c, ns, name)
	}
	lows := map[string]string{}
	for i := 0; i < 3; i++ {
		h := runPod(ctx, t, c, pin(gpuPod(ns, fmt.Sprintf("high-%d", i), 32), high), node)
		checkCards(ctx, t, c, h)
	}
	for i := 0; i < 3; i++ {
		l := runPod(ctx, t, c, pin(gpuPod(ns, fmt.Sprintf("rest-%d", i), 8), low), node)
		lows[l.Name] = checkCards(ctx, t, c, l).Containers[0].CardUUID
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pin(gpuPod(ns, "mid", 20), high), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFailedScheduling(ctx, t, c, ns, "mid")
	t.Logf("mid pending: %s", failedSchedulingMessage(ctx, t, c, ns, "mid"))
	// Give kube-scheduler time to act on its preemption, were it to.
	var evicted string
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		for name := range lows {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
				evicted = fmt.Sprintf("%s (%v)", name, err)
				return true, nil
			}
		}
		return false, nil
	}); err == nil {
		t.Errorf("low-priority pod %s was evicted for mid, which no card could take", evicted)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "mid", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("mid bound to %q (%v), want Pending", p.Spec.NodeName, err)
	}
}

// deletePodNow deletes the pod at once and waits until it is gone.
func deletePodNow(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, ns, name, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// priorityClass creates a PriorityClass for the test, deleted at its end.
func priorityClass(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, value int32) string {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// waitEvicted waits until exactly the low pods named in gone are gone (or
// terminating) and every other low pod of cardOf still runs; it returns them.
func waitEvicted(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, cardOf map[string]string, gone []string) []string {
	t.Helper()
	var state string
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var wrong []string
		for name := range cardOf {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			evicted := apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
			if evicted != slices.Contains(gone, name) {
				wrong = append(wrong, fmt.Sprintf("%s evicted=%v", name, evicted))
			}
		}
		slices.Sort(wrong)
		state = strings.Join(wrong, ", ")
		return len(wrong) == 0, nil
	})
	if err != nil {
		t.Fatalf("evictions: want exactly %v gone; wrong: %s", gone, state)
	}
	return gone
}

// waitPDBSeen waits until the budget's status is written (by the
// disruption controller when one runs; a moment otherwise).
func waitPDBSeen(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "keep", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration > 0, nil
	})
}

// failedSchedulingMessage returns the last FailedScheduling message of the pod.
func failedSchedulingMessage(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedScheduling"})
	if err != nil || len(evs.Items) == 0 {
		t.Fatalf("no FailedScheduling event for %s: %v", name, err)
	}
	return evs.Items[len(evs.Items)-1].Message
}
