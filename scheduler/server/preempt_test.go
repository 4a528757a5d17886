package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// lowPods fills every card of node n1 (cards of 40) with five 8-unit pods
// at priority 0, named c<card>-<k>, labelled card=<card>.
func lowPods(cards int) []*corev1.Pod {
	var out []*corev1.Pod
	for c := 0; c < cards; c++ {
		for k := 0; k < 5; k++ {
			out = append(out, podtest.Make("ns", fmt.Sprintf("c%d-%d", c, k)).Label("card", fmt.Sprint(c)).
				GPU("main", 8).AssignOn("n1", api.PhaseAllocated, c).Obj())
		}
	}
	return out
}

func prioritized(b *podtest.Builder, p int32) *corev1.Pod {
	pod := b.Obj()
	pod.Spec.Priority = &p
	return pod
}

// victimsOf returns the names of the victims the answer gives on node.
func victimsOf(t *testing.T, e *env, res *extenderv1.ExtenderPreemptionResult, node string) []string {
	t.Helper()
	mv := res.NodeNameToMetaVictims[node]
	if mv == nil {
		return nil
	}
	var out []string
	for _, p := range mv.Pods {
		out = append(out, p.UID[len("uid-ns-"):])
	}
	slices.Sort(out)
	return out
}

// kubeSpread is kube-scheduler's victims by node totals: one pod of each card.
func kubeSpread(cards int) *extenderv1.ExtenderPreemptionArgs {
	mv := &extenderv1.MetaVictims{}
	for c := 0; c < cards; c++ {
		mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: fmt.Sprintf("uid-ns-c%d-0", c)})
	}
	return &extenderv1.ExtenderPreemptionArgs{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n1": mv}}
}

func TestPreemptFreesOneCard(t *testing.T) {
	node := fixture.MakeNode("n1").Cards(5, 40).Obj()
	cardOf := func(names []string) map[string]bool {
		out := map[string]bool{}
		for _, n := range names {
			out[n[:2]] = true
		}
		return out
	}
	t.Run("five pods of one card, none elsewhere", func(t *testing.T) {
		e := newEnv(t, envOpts{}, []*corev1.Node{node}, lowPods(5)...)
		args := kubeSpread(5)
		args.Pod = prioritized(podtest.Make("ns", "big").GPU("main", 40), 100)
		res, err := e.srv.Preempt(context.Background(), args)
		if err != nil {
			t.Fatal(err)
		}
		got := victimsOf(t, e, res, "n1")
		if len(got) != 5 || len(cardOf(got)) != 1 {
			t.Fatalf("victims %v: want the five pods of one card", got)
		}
	})
	t.Run("a budget moves the choice to an unprotected card", func(t *testing.T) {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "keep"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "card", Operator: metav1.LabelSelectorOpIn, Values: []string{"0", "1", "2", "3"}}}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
		e := newEnv(t, envOpts{pdbs: []*policyv1.PodDisruptionBudget{pdb}}, []*corev1.Node{node}, lowPods(5)...)
		args := kubeSpread(5)
		args.Pod = prioritized(podtest.Make("ns", "big").GPU("main", 40), 100)
		res, err := e.srv.Preempt(context.Background(), args)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"c4-0", "c4-1", "c4-2", "c4-3", "c4-4"}
		if diff := cmp.Diff(want, victimsOf(t, e, res, "n1")); diff != "" {
			t.Errorf("victims (-want +got):\n%s", diff)
		}
		if n := res.NodeNameToMetaVictims["n1"].NumPDBViolations; n != 0 {
			t.Errorf("%d violations, want 0", n)
		}
	})
	t.Run("a node where no eviction helps is dropped", func(t *testing.T) {
		e := newEnv(t, envOpts{}, []*corev1.Node{node}, lowPods(5)...)
		args := kubeSpread(5)
		args.Pod = prioritized(podtest.Make("ns", "big").GPU("main", 40), 0)
		res, err := e.srv.Preempt(context.Background(), args)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.NodeNameToMetaVictims) != 0 {
			t.Errorf("nodes %v: a pod of equal priority evicts nothing", res.NodeNameToMetaVictims)
		}
	})
	t.Run("a whole-card preemptor frees a card", func(t *testing.T) {
		e := newEnv(t, envOpts{}, []*corev1.Node{node}, lowPods(5)...)
		args := kubeSpread(5)
		args.Pod = prioritized(podtest.Make("ns", "train").Whole("main", 1), 100)
		res, err := e.srv.Preempt(context.Background(), args)
		if err != nil {
			t.Fatal(err)
		}
		got := victimsOf(t, e, res, "n1")
		if len(got) != 5 || len(cardOf(got)) != 1 {
			t.Fatalf("victims %v: want the five pods of one card", got)
		}
	})
}

// TestPreemptPromisesTheFreedCard: once kube-scheduler nominates the node,
// the card the victims free is the preemptor's: another pod does not fit
// on it, the preemptor does and binds to it.
func TestPreemptPromisesTheFreedCard(t *testing.T) {
	node := fixture.MakeNode("n1").Cards(2, 40).Obj()
	pods := lowPods(2)
	for _, p := range pods[:5] {
		one := int32(1) // card 0's pods matter more: card 1 is freed
		p.Spec.Priority = &one
	}
	e := newEnv(t, envOpts{}, []*corev1.Node{node}, pods...)
	big := prioritized(podtest.Make("ns", "big").GPU("main", 40), 100)
	args := kubeSpread(2)
	args.Pod = big
	res, err := e.srv.Preempt(context.Background(), args)
	if err != nil {
		t.Fatal(err)
	}
	victims := victimsOf(t, e, res, "n1")
	if len(victims) != 5 {
		t.Fatalf("victims %v", victims)
	}
	freed := int(victims[0][1] - '0')
	if freed != 1 {
		t.Fatalf("victims %v: want card 1's, whose pods have the lower priority", victims)
	}
	big.Status.NominatedNodeName = "n1"
	e.cache.SetPod(big)
	for _, p := range pods {
		if slices.Contains(victims, p.Name) {
			e.cache.DeletePod(p.UID)
		}
	}
	names := []string{"n1"}
	other := podtest.Make("ns", "other").GPU("main", 8).Obj()
	f, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: other, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	if len(*f.NodeNames) != 0 {
		t.Errorf("another pod fits on n1 while its freed card is promised")
	}
	// Card 0 empties too: the preemptor still binds to the card it was promised.
	for _, p := range pods[:5] {
		e.cache.DeletePod(p.UID)
	}
	f, err = e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: big, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	if len(*f.NodeNames) != 1 {
		t.Fatalf("the preemptor does not fit on its nominated node: %v", f.FailedNodes)
	}
	if _, err := e.client.CoreV1().Pods("ns").Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Bind(context.Background(), &extenderv1.ExtenderBindingArgs{PodName: "big", PodNamespace: "ns", PodUID: big.UID, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	a := assignment(t, e.apiPod(t, "big"))
	if a.Containers[0].CardIndex != freed {
		t.Errorf("bound to card %d, want the freed card %d", a.Containers[0].CardIndex, freed)
	}
}
