package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// TestMemoGivesTheDecisionsOfAFullEvaluation: through a random run of pod
// placements and removals, node changes (isolation, inventory) and new pods
// (the workload), with the candidates in a new order on every call, every
// call's decisions equal those of a server without the memo on the same
// cache, for every policy and for single, multi-container and whole-card
// pods; and the memo did serve decisions, whole calls and parts of calls
// (the comparison is not vacuous).
func TestMemoGivesTheDecisionsOfAFullEvaluation(t *testing.T) {
	const nodes = memoMinNodes + 44
	rng := rand.New(rand.NewSource(11))
	var ns []*corev1.Node
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
		ns = append(ns, fixture.MakeNode(names[i]).Cards(1+i%4, 24+8*int64(i%3)).Obj())
	}
	e := newEnv(t, envOpts{policy: "frag", allowed: registry.Names()}, ns)
	var allowed []*allocator.Policy
	for _, name := range registry.Names() {
		p, err := registry.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, p)
	}
	fresh, err := New(Config{Cache: e.cache, Client: e.client, Policy: e.srv.policy, AllowedPolicies: allowed})
	if err != nil {
		t.Fatal(err)
	}
	fresh.memo = nil

	shapes := []func(p *podtest.Builder) *podtest.Builder{
		func(p *podtest.Builder) *podtest.Builder { return p.GPU("main", 8) },
		func(p *podtest.Builder) *podtest.Builder { return p.GPU("main", 20) },
		func(p *podtest.Builder) *podtest.Builder { return p.GPU("a", 4).GPU("b", 12) },
		func(p *podtest.Builder) *podtest.Builder { return p.Whole("train", 2) },
		func(p *podtest.Builder) *podtest.Builder { return p.GPU("big", 33) },
	}
	policies := append([]string{""}, registry.Names()...)
	var placed []*corev1.Pod
	ctx := context.Background()
	counts := func() (memo, evaluated float64) {
		return testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo")), testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("evaluated"))
	}
	partial := 0
	seq := 0
	for step := 0; step < 250; step++ {
		switch r := rng.Intn(10); {
		case r < 4: // a pod placed on a random node and card (a bind)
			seq++
			n := names[rng.Intn(nodes)]
			p := podtest.Make("ns", fmt.Sprintf("p%d", seq)).GPU("main", int64(1+rng.Intn(6))).AssignOn(n, api.PhaseAllocated, 0).Obj()
			e.cache.SetPod(p)
			placed = append(placed, p)
		case r < 6 && len(placed) > 0: // a pod gone
			i := rng.Intn(len(placed))
			e.cache.DeletePod(placed[i].UID)
			placed = append(placed[:i], placed[i+1:]...)
		case r < 7: // a node's card isolated, or its inventory changed
			i := rng.Intn(nodes)
			w := fixture.MakeNode(names[i]).Cards(1+rng.Intn(4), 24+8*int64(rng.Intn(3)))
			if rng.Intn(2) == 0 {
				w = w.Annotation(api.DefaultNames().AnnotationIsolation(), "0")
			}
			e.cache.SetNode(w.Obj())
		case r < 8: // a node gone, its pods with it, and a new one that takes its ID
			i := rng.Intn(nodes)
			gone, err := e.cache.NodeSnapshot(names[i])
			if err != nil {
				t.Fatal(err)
			}
			for k := len(placed) - 1; k >= 0; k-- {
				if placed[k].Spec.NodeName == names[i] {
					e.cache.DeletePod(placed[k].UID)
					placed = append(placed[:k], placed[k+1:]...)
				}
			}
			e.cache.DeleteNode(names[i])
			seq++
			names[i] = fmt.Sprintf("new%d", seq)
			e.cache.SetNode(fixture.MakeNode(names[i]).Cards(1+rng.Intn(4), 24+8*int64(rng.Intn(3))).Obj())
			if got, err := e.cache.NodeSnapshot(names[i]); err != nil || got.ID != gone.ID {
				t.Fatalf("step %d: the new node %s has ID %d (%v), want the gone node's %d", step, names[i], got.ID, err, gone.ID)
			}
		case r < 9: // a pending pod seen: the workload changes
			seq++
			e.cache.SetPod(shapes[rng.Intn(len(shapes))](podtest.Make("ns", fmt.Sprintf("pending%d", seq))).Obj())
		}
		// Several calls per step: the later ones find the memo, whole when
		// nothing changed since, in part when one node did.
		shape, pol := rng.Intn(len(shapes)), policies[rng.Intn(len(policies))]
		for k := 0; k < 3; k++ {
			if rng.Intn(3) == 0 {
				shape, pol = rng.Intn(len(shapes)), policies[rng.Intn(len(policies))]
			}
			if k > 0 && rng.Intn(3) == 0 && len(placed) > 0 { // between two calls, one node changes
				i := rng.Intn(len(placed))
				e.cache.DeletePod(placed[i].UID)
				placed = append(placed[:i], placed[i+1:]...)
			}
			w := shapes[shape](podtest.Make("ns", "asking"))
			if pol != "" {
				w = w.Annotation(api.DefaultNames().AnnotationPolicy(), pol)
			}
			pod := w.Obj()
			memo0, eval0 := counts()
			// In a new order on each call, as kube-scheduler sends them.
			cand := slices.Clone(names)
			rng.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
			if rng.Intn(4) == 0 {
				cand = cand[:memoMinNodes-1] // too few: not memoized
			}
			var cands candidates // half the calls: resolved by the caller (the decoder)
			if rng.Intn(2) == 0 {
				cands.snaps, cands.ids = make([]*allocator.Node, len(cand)), make([]int32, len(cand))
				e.cache.SnapshotsOf(cands.snaps, make([]string, len(cand)), cands.ids, func(i int) []byte { return []byte(cand[i]) })
			}
			got, _, _, gotReq, err1 := e.srv.evaluate(ctx, pod, cand, cands)
			want, _, _, wantReq, err2 := fresh.evaluate(ctx, pod, cand, candidates{})
			if err1 != nil || err2 != nil || (gotReq == nil) != (wantReq == nil) {
				t.Fatalf("step %d: errors %v %v, request errors %v %v", step, err1, err2, gotReq, wantReq)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("step %d, pod %v: decisions with the memo differ from a full evaluation (-full +memo):\n%s", step, pod.Annotations, diff)
			}
			e.srv.putDecisions(got)
			fresh.putDecisions(want)
			if memo1, eval1 := counts(); memo1 > memo0 && eval1 > eval0 {
				partial++
			}
		}
	}
	if partial == 0 {
		t.Error("no call took part of its decisions from the memo and evaluated the rest")
	}
	reused, evaluated := counts()
	if reused == 0 || evaluated == 0 {
		t.Fatalf("memo served %v decisions, the policy made %v: the run did not exercise both", reused, evaluated)
	}
	t.Logf("decisions from the memo %v, evaluated %v; calls served in part %d", reused, evaluated, partial)
}

// TestMemoMakesATableTheSecondTimeAKeyIsSeenAndKeepsTheNewest: a key seen
// once gets no table (a workload that changes on every call costs no map),
// the second time it does; beyond memoEntries tables the least recently
// used goes.
func TestMemoMakesATableTheSecondTimeAKeyIsSeenAndKeepsTheNewest(t *testing.T) {
	var m evalMemo
	key := func(i int) memoKey { return memoKey{demands: fmt.Sprint(i)} }
	if m.table(key(0)) != nil {
		t.Fatal("a key seen once has a table")
	}
	t0 := m.table(key(0))
	if t0 == nil || m.table(key(0)) != t0 {
		t.Fatal("a key seen twice has no table, or a new one each time")
	}
	for i := 1; i <= memoEntries; i++ {
		m.table(key(i))
		if m.table(key(i)) == nil {
			t.Fatalf("key %d seen twice has no table", i)
		}
	}
	for i := 1; i <= memoEntries; i++ {
		found := false
		for _, tb := range m.tables {
			found = found || (tb != nil && tb.key == key(i))
		}
		if !found {
			t.Errorf("table %d is gone", i)
		}
	}
	for _, tb := range m.tables {
		if tb == t0 {
			t.Errorf("the least recently used table is still kept after %d newer ones", memoEntries)
		}
	}
}

// TestMemoLeavesOutPodsWithACardChoiceAndSmallCalls: those are evaluated in
// full every time.
func TestMemoLeavesOutPodsWithACardChoiceAndSmallCalls(t *testing.T) {
	p, _ := registry.Lookup("binpack")
	plain := api.PodRequest{Containers: []api.ContainerRequest{{Name: "main", Units: 8}}}
	if _, ok := memoKeyFor(p, nil, plain, memoMinNodes); !ok {
		t.Error("a plain pod at memoMinNodes nodes is not memoized")
	}
	if _, ok := memoKeyFor(p, nil, plain, memoMinNodes-1); ok {
		t.Error("a call below memoMinNodes nodes is memoized")
	}
	chooser := plain
	chooser.Cards = api.CardChoice{UUIDs: []string{"GPU-1"}}
	if _, ok := memoKeyFor(p, nil, chooser, memoMinNodes); ok {
		t.Error("a pod with a card choice is memoized")
	}
	a, _ := memoKeyFor(p, nil, api.PodRequest{Containers: []api.ContainerRequest{{Name: "a", Units: 1}, {Name: "b", Units: 12}}}, memoMinNodes)
	b, _ := memoKeyFor(p, nil, api.PodRequest{Containers: []api.ContainerRequest{{Name: "a", Units: 11}, {Name: "b", Units: 2}}}, memoMinNodes)
	if a == b {
		t.Error("two different requests share a key")
	}
}

// TestMemoUnderConcurrentCallsAndChanges: filter calls over HTTP from
// several goroutines while pods come and go (run with -race: the memo's
// entries, the recycled name and snapshot slices), then one more call
// agrees with a full evaluation.
func TestMemoUnderConcurrentCallsAndChanges(t *testing.T) {
	const nodes = memoMinNodes + 10
	var ns []*corev1.Node
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
		ns = append(ns, fixture.MakeNode(names[i]).Cards(2, 16).Obj())
	}
	e := newEnv(t, envOpts{policy: "frag", mode: FilterAll}, ns)
	srv := httptest.NewServer(e.srv.Handler(nil))
	defer srv.Close()
	body := mustJSON(t, extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "asking").GPU("main", 6).Obj(), NodeNames: &names})
	stop := make(chan struct{})
	var changes sync.WaitGroup
	changes.Add(1)
	go func() {
		defer changes.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := podtest.Make("ns", fmt.Sprintf("p%d", i%50)).GPU("main", 4).AssignOn(names[i%nodes], api.PhaseAllocated, i%2).Obj()
			if i%3 == 0 {
				e.cache.DeletePod(p.UID)
			} else {
				e.cache.SetPod(p)
			}
		}
	}()
	var calls sync.WaitGroup
	for g := 0; g < 6; g++ {
		calls.Add(1)
		go func() {
			defer calls.Done()
			for k := 0; k < 30; k++ {
				resp, err := srv.Client().Post(srv.URL+"/filter", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				var res extenderv1.ExtenderFilterResult
				err = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || res.NodeNames == nil || len(*res.NodeNames)+len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != nodes {
					t.Errorf("status %d, %v: %d kept, %d failed, %d unresolvable of %d nodes", resp.StatusCode, err, len(ptr.Deref(res.NodeNames, nil)), len(res.FailedNodes), len(res.FailedAndUnresolvableNodes), nodes)
					return
				}
			}
		}()
	}
	calls.Wait()
	close(stop)
	changes.Wait()

	fresh, err := New(Config{Cache: e.cache, Client: e.client, Policy: e.srv.policy})
	if err != nil {
		t.Fatal(err)
	}
	fresh.memo = nil
	pod := podtest.Make("ns", "asking").GPU("main", 6).Obj()
	got, _, _, _, err1 := e.srv.evaluate(context.Background(), pod, names, candidates{})
	want, _, _, _, err2 := fresh.evaluate(context.Background(), pod, names, candidates{})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after the concurrent run, decisions with the memo differ from a full evaluation (-full +memo):\n%s", diff)
	}
	if testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo")) == 0 {
		t.Error("the memo served no decision")
	}
}

// TestMemoMatchesNodesByNameWhateverTheirOrder: kube-scheduler sends the
// candidates in a new order on almost every call; the memo finds each node
// by name, and its decisions stay those of a full evaluation.
func TestMemoMatchesNodesByNameWhateverTheirOrder(t *testing.T) {
	var ns []*corev1.Node
	names := make([]string, memoMinNodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
		ns = append(ns, fixture.MakeNode(names[i]).Cards(2, 16+int64(i%3)).Obj())
	}
	e := newEnv(t, envOpts{policy: "binpack"}, ns)
	fresh, err := New(Config{Cache: e.cache, Client: e.client, Policy: e.srv.policy})
	if err != nil {
		t.Fatal(err)
	}
	fresh.memo = nil
	pod := podtest.Make("ns", "asking").GPU("main", 6).Obj()
	ctx := context.Background()
	for k := 0; k < 2; k++ { // seen, then a table filled
		if _, _, _, _, err := e.srv.evaluate(ctx, pod, names, candidates{}); err != nil {
			t.Fatal(err)
		}
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	got, _, _, _, err1 := e.srv.evaluate(ctx, pod, reversed, candidates{})
	want, _, _, _, err2 := fresh.evaluate(ctx, pod, reversed, candidates{})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("in reverse order, decisions with the memo differ from a full evaluation (-full +memo):\n%s", diff)
	}
	reused := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo"))
	evaluated := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("evaluated"))
	if reused != float64(len(names)) || evaluated != float64(2*len(names)) {
		t.Errorf("memo %v, evaluated %v; want the third call, in reverse order, all from the memo (%d) after two full ones", reused, evaluated, len(names))
	}
}

// TestMemoTellsApartANodeThatTookAGoneNodesID: the memo indexes its tables
// by node ID, and a node created after another is gone takes its ID. The
// slot still holds the gone node's decision; the new node must be
// evaluated, not given it.
func TestMemoTellsApartANodeThatTookAGoneNodesID(t *testing.T) {
	for _, resolved := range []bool{false, true} {
		t.Run(fmt.Sprintf("resolved=%v", resolved), func(t *testing.T) {
			var ns []*corev1.Node
			names := make([]string, memoMinNodes)
			for i := range names {
				names[i] = fmt.Sprintf("n%03d", i)
				ns = append(ns, fixture.MakeNode(names[i]).Cards(2, 16).Obj())
			}
			e := newEnv(t, envOpts{policy: "binpack"}, ns)
			pod := podtest.Make("ns", "asking").GPU("main", 6).Obj()
			ctx := context.Background()
			for k := 0; k < 2; k++ { // seen, then a table filled
				if _, _, _, _, err := e.srv.evaluate(ctx, pod, names, candidates{}); err != nil {
					t.Fatal(err)
				}
			}
			gone, err := e.cache.NodeSnapshot(names[7])
			if err != nil {
				t.Fatal(err)
			}
			w0 := e.cache.Workload()
			e.cache.DeleteNode(names[7])
			names[7] = "newcomer"
			e.cache.SetNode(fixture.MakeNode(names[7]).Cards(2, 16).Obj())
			if n, err := e.cache.NodeSnapshot(names[7]); err != nil || n.ID != gone.ID {
				t.Fatalf("the new node has ID %d (%v), want the gone node's %d", n.ID, err, gone.ID)
			}
			if e.cache.Workload() != w0 {
				t.Fatal("the workload changed: the call would use a new table, and this test would prove nothing")
			}
			memo0 := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo"))
			var cands candidates
			if resolved {
				cands.snaps, cands.ids = make([]*allocator.Node, len(names)), make([]int32, len(names))
				e.cache.SnapshotsOf(cands.snaps, make([]string, len(names)), cands.ids, func(i int) []byte { return []byte(names[i]) })
			}
			got, _, _, _, err := e.srv.evaluate(ctx, pod, names, cands)
			if err != nil {
				t.Fatal(err)
			}
			if d := got[7]; d.Node != "newcomer" || !d.Fits {
				t.Errorf("the new node's decision is %+v, want the newcomer's own, fitting", d)
			}
			if reused := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo")) - memo0; reused != float64(len(names)-1) {
				t.Errorf("the memo served %v decisions, want every node's but the newcomer's (%d)", reused, len(names)-1)
			}

		})
	}
}

// TestMemoKeepsDecisionsAcrossNewPodsForPoliciesThatIgnoreTheWorkload: a
// new pod changes the workload. binpack ignores it (IgnoresWorkload), so its
// table holds and the next call takes every decision from the memo; frag
// reads it, so the next call evaluates every node again.
func TestMemoKeepsDecisionsAcrossNewPodsForPoliciesThatIgnoreTheWorkload(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		wantMemo bool
	}{{"binpack", true}, {"frag", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			var ns []*corev1.Node
			names := make([]string, memoMinNodes)
			for i := range names {
				names[i] = fmt.Sprintf("n%03d", i)
				ns = append(ns, fixture.MakeNode(names[i]).Cards(2, 16+int64(i%3)).Obj())
			}
			e := newEnv(t, envOpts{policy: tc.policy}, ns)
			pod := podtest.Make("ns", "asking").GPU("main", 6).Obj()
			ctx := context.Background()
			for k := 0; k < 2; k++ { // seen, then a table filled
				if _, _, _, _, err := e.srv.evaluate(ctx, pod, names, candidates{}); err != nil {
					t.Fatal(err)
				}
			}
			w0 := e.cache.Workload()
			e.cache.SetPod(podtest.Make("ns", "newcomer").GPU("main", 3).Obj())
			if e.cache.Workload() == w0 {
				t.Fatal("a new pod left the workload as it was: the test proves nothing")
			}
			memo0 := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo"))
			got, _, _, _, err := e.srv.evaluate(ctx, pod, names, candidates{})
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := New(Config{Cache: e.cache, Client: e.client, Policy: e.srv.policy})
			if err != nil {
				t.Fatal(err)
			}
			fresh.memo = nil
			want, _, _, _, err := fresh.evaluate(ctx, pod, names, candidates{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("after a new pod, decisions with the memo differ from a full evaluation (-full +memo):\n%s", diff)
			}
			reused := testutil.ToFloat64(e.srv.metrics.nodes.WithLabelValues("memo")) - memo0
			if want := map[bool]float64{true: float64(len(names)), false: 0}[tc.wantMemo]; reused != want {
				t.Errorf("after a new pod the memo served %v decisions, want %v", reused, want)
			}
		})
	}
}
