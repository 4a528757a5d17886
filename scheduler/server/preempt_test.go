package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// preemptEnv is a server whose informers (pods, PodDisruptionBudgets) are
// indexers the test fills.
type preemptEnv struct {
	*env
	pods, pdbs toolscache.Indexer
}

func newPreemptEnv(t *testing.T, nodes []*corev1.Node, pods ...*corev1.Pod) *preemptEnv {
	t.Helper()
	e := &preemptEnv{env: newEnv(t, envOpts{}, nodes, pods...),
		pods: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}),
		pdbs: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})}
	for _, p := range pods {
		if err := e.pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	e.srv.pods = corelisters.NewPodLister(e.pods)
	e.srv.pdbs = policylisters.NewPodDisruptionBudgetLister(e.pdbs)
	return e
}

// lowPods are count pods of units GiB on card of node, priority 0, named
// prefix0..., each started after the previous.
func lowPods(node, prefix string, card, count int, units int64) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < count; i++ {
		out = append(out, podtest.Make("ns", fmt.Sprintf("%s%d", prefix, i)).GPU("main", units).Label("card", prefix).
			Created(podtest.Epoch.Add(time.Duration(i)*time.Second)).Priority(0).AssignOn(node, api.PhaseAllocated, card).Obj())
	}
	return out
}

func preemptArgs(pod *corev1.Pod, nodes ...string) *extenderv1.ExtenderPreemptionArgs {
	m := map[string]*extenderv1.MetaVictims{}
	for _, n := range nodes {
		m[n] = &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{{UID: "kube-schedulers-own-choice"}}}
	}
	return &extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: m}
}

// victimNames maps the answer's victims back to pod names, sorted.
func victimNames(res *extenderv1.ExtenderPreemptionResult, node string, pods []*corev1.Pod) []string {
	var out []string
	v := res.NodeNameToMetaVictims[node]
	if v == nil {
		return nil
	}
	for _, mp := range v.Pods {
		for _, p := range pods {
			if string(p.UID) == mp.UID {
				out = append(out, p.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestPreemptVerbFreesOneCardAndHonoursDisruptionBudgets(t *testing.T) {
	nodes := []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj(), fixture.MakeNode("n2").Card(0, 40).Obj()}
	pods := append(lowPods("n1", "a", 0, 5, 8), lowPods("n1", "b", 1, 5, 8)...)
	// n2's only card holds a pod of higher priority than the preemptor's.
	pods = append(pods, podtest.Make("ns", "vip").GPU("main", 40).Priority(1000).AssignOn("n2", api.PhaseAllocated, 0).Obj())
	hi := podtest.Make("ns", "hi").GPU("main", 40).Priority(100).Obj()
	e := newPreemptEnv(t, nodes, append(pods, hi)...)

	// Through the HTTP route, as kube-scheduler calls it.
	body, _ := json.Marshal(preemptArgs(hi, "n1", "n2"))
	rec := httptest.NewRecorder()
	e.srv.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/preempt", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST /preempt: %d %s", rec.Code, rec.Body)
	}
	var res extenderv1.ExtenderPreemptionResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if _, ok := res.NodeNameToMetaVictims["n2"]; ok || len(res.NodeNameToMetaVictims) != 1 {
		t.Errorf("answered nodes %v, want n1 only (no eviction frees n2's card)", slices.Sorted(mapKeys(res.NodeNameToMetaVictims)))
	}
	if diff := cmp.Diff([]string{"a0", "a1", "a2", "a3", "a4"}, victimNames(&res, "n1", pods)); diff != "" {
		t.Errorf("victims on n1 (-want +got):\n%s", diff)
	}

	// A budget that allows no disruption of card 0's pods moves the choice
	// to card 1, with no violation.
	if err := e.pdbs.Add(&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "guard"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"card": "a"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}); err != nil {
		t.Fatal(err)
	}
	got, err := e.srv.Preempt(context.Background(), preemptArgs(hi, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b0", "b1", "b2", "b3", "b4"}, victimNames(got, "n1", pods)); diff != "" || got.NodeNameToMetaVictims["n1"].NumPDBViolations != 0 {
		t.Errorf("victims with card 0 guarded (-want +got):\n%s violations %d", diff, got.NodeNameToMetaVictims["n1"].NumPDBViolations)
	}
}

func TestPreemptVerbThatCannotHelpSaysWhyOnThePod(t *testing.T) {
	nodes := []*corev1.Node{fixture.MakeNode("n2").Card(0, 40).Obj()}
	vip := podtest.Make("ns", "vip").GPU("main", 40).Priority(1000).AssignOn("n2", api.PhaseAllocated, 0).Obj()
	hi := podtest.Make("ns", "hi").GPU("main", 40).Priority(100).Obj()
	e := newPreemptEnv(t, nodes, vip, hi)
	res, err := e.srv.Preempt(context.Background(), preemptArgs(hi, "n2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NodeNameToMetaVictims) != 0 {
		t.Errorf("answered %v, want no node", res.NodeNameToMetaVictims)
	}
	evs, err := e.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(evs.Items) != 1 {
		t.Fatalf("events %v (%v), want one", evs, err)
	}
	if ev := evs.Items[0]; ev.Reason != ReasonPreemptionNotHelpful || ev.InvolvedObject.Name != "hi" || !strings.Contains(ev.Message, "no pod on node n2's cards has a priority below 100") {
		t.Errorf("event %s on %s: %q", ev.Reason, ev.InvolvedObject.Name, ev.Message)
	}
	for _, bad := range []*extenderv1.ExtenderPreemptionArgs{nil, {}, {Pod: hi}} {
		if _, err := e.srv.Preempt(context.Background(), bad); httpStatus(err) != http.StatusBadRequest {
			t.Errorf("Preempt(%+v): %v, want a bad request", bad, err)
		}
	}
}

// The answer is only an offer: nothing is kept for the preemptor until it
// is nominated to the node and the victims terminate. Before that, its bind
// there fails on the victims' real use (no card is ever given twice), and
// other pods decide on the real use; after, the freed card is kept from
// pods of lower priority and the preemptor binds to it.
func TestPromiseHoldsTheFreedCardOnlyOnceTheVictimsTerminate(t *testing.T) {
	nodes := []*corev1.Node{fixture.MakeNode("n1").Card(0, 48).Card(1, 48).Obj()}
	pods := append(lowPods("n1", "a", 0, 5, 8), lowPods("n1", "b", 1, 5, 8)...)
	hi := podtest.Make("ns", "hi").GPU("main", 40).Priority(100).Obj()
	lo := podtest.Make("ns", "lo").GPU("main", 16).Priority(0).Obj()
	peer := podtest.Make("ns", "peer").GPU("main", 16).Priority(100).Obj()
	vip := podtest.Make("ns", "vip").GPU("main", 16).Priority(200).Obj()
	e := newPreemptEnv(t, nodes, append(pods, hi, lo, peer, vip)...)
	ctx := context.Background()
	res, err := e.srv.Preempt(ctx, preemptArgs(hi, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	victims := victimNames(res, "n1", pods)
	if diff := cmp.Diff([]string{"a1", "a2", "a3", "a4"}, victims); diff != "" {
		t.Fatalf("victims (-want +got):\n%s", diff)
	}
	fits := func(p *corev1.Pod) bool {
		t.Helper()
		r, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: p, NodeNames: &[]string{"n1"}})
		if err != nil {
			t.Fatal(err)
		}
		e.cache.Unreserve(p.UID) // a probe: the pod is not bound where its filter reserved its cards
		return len(*r.NodeNames) == 1
	}
	// Nominated, but kube-scheduler evicted nothing (it chose otherwise).
	nominated := hi.DeepCopy()
	nominated.Status.NominatedNodeName = "n1"
	if err := e.pods.Update(nominated); err != nil {
		t.Fatal(err)
	}
	if in := e.srv.promises.inForce(e.srv.pods, e.srv.clock.Now()); len(in) != 0 {
		t.Errorf("promises in force before any victim terminates: %+v", in)
	}
	if r, err := e.srv.Bind(ctx, bindArgs(hi, "n1")); err != nil || !strings.Contains(r.Error, "no longer fits") {
		t.Errorf("preemptor's bind before any eviction: %+v %v, want no fit", r, err)
	}
	// Victims terminating: their units still count.
	for _, p := range pods {
		if slices.Contains(victims, p.Name) {
			d := p.DeepCopy()
			d.DeletionTimestamp = &metav1.Time{Time: podtest.Epoch}
			if err := e.pods.Update(d); err != nil {
				t.Fatal(err)
			}
			e.cache.SetPod(d)
		}
	}
	if r, err := e.srv.Bind(ctx, bindArgs(hi, "n1")); err != nil || r.Error == "" {
		t.Errorf("preemptor's bind while its victims terminate: %+v %v, want no fit", r, err)
	}
	// Victims gone: card 0 has 40 GiB free, promised to hi.
	for _, p := range pods {
		if slices.Contains(victims, p.Name) {
			if err := e.pods.Delete(p); err != nil {
				t.Fatal(err)
			}
			e.cache.DeletePod(p.UID)
		}
	}
	if fits(lo) {
		t.Error("a pod of lower priority fits on the card promised to the preemptor")
	}
	if fits(peer) {
		t.Error("a pod of the preemptor's priority fits on the card promised to it")
	}
	if !fits(vip) {
		t.Error("a pod of higher priority does not fit on n1: a promise only holds back lower or equal priorities")
	}
	if r, err := e.srv.Bind(ctx, bindArgs(hi, "n1")); err != nil || r.Error != "" {
		t.Fatalf("preemptor's bind: %+v %v", r, err)
	}
	if a := assignment(t, e.apiPod(t, "hi")); a.Containers[0].CardIndex != 0 {
		t.Errorf("preemptor bound to card %d, want the freed card 0", a.Containers[0].CardIndex)
	}
}
