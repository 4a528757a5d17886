package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// countingPolicy is binpack with a count of the cards it was asked to
// choose (one per share demand per evaluated node); onChoose, when set,
// runs on every call.
func countingPolicy(t testing.TB, calls *atomic.Int64, onChoose func()) *allocator.Policy {
	t.Helper()
	bp, err := registry.Lookup("binpack")
	if err != nil {
		t.Fatal(err)
	}
	// A new Policy, not a copy of binpack's: a copy would keep binpack's
	// fast path, which never calls ChooseCard.
	return &allocator.Policy{Name: bp.Name, Score: bp.Score, IgnoresWorkload: bp.IgnoresWorkload,
		ChooseCard: func(n *allocator.Node, free []int64, d allocator.Demand, w *allocator.Workload) int {
			calls.Add(1)
			if onChoose != nil {
				onChoose()
			}
			return bp.ChooseCard(n, free, d, w)
		}}
}

// podOfContainers is a pod of n containers asking for 1 unit each.
func podOfContainers(name string, n int) *corev1.Pod {
	p := podtest.Make("ns", name)
	for i := 0; i < n; i++ {
		p.GPU(fmt.Sprint("c", i), 1)
	}
	return p.Obj()
}

// The 16,384-container pod of issue 16 is refused before any node is
// evaluated (the policy chooses no card at all), unresolvably, by filter,
// prioritize and bind alike; a pod of exactly MaxGPUContainers is placed.
func TestPodsOverTheContainerCapAreRefusedBeforeEvaluation(t *testing.T) {
	nodes := []*corev1.Node{fixture.MakeNode("n1").Cards(8, 80).Obj(), fixture.MakeNode("n2").Cards(8, 80).Obj()}
	huge := podOfContainers("huge", 16384)
	atCap := podOfContainers("at-cap", MaxGPUContainers)
	overCap := podOfContainers("over-cap", MaxGPUContainers+1)
	e := newEnv(t, envOpts{mode: FilterAll}, nodes, huge, atCap, overCap)
	var calls atomic.Int64
	e.srv.policy = countingPolicy(t, &calls, nil)
	ctx := context.Background()

	for _, pod := range []*corev1.Pod{huge, overCap} {
		calls.Store(0)
		n := len(pod.Spec.Containers)
		want := fmt.Sprintf("%d containers ask for example.com/gpu-mem, the gpushare extender places at most 128 per pod: split the work over several pods", n)
		res, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")})
		if err != nil {
			t.Fatal(err)
		}
		if len(*res.NodeNames) != 0 || len(res.FailedNodes) != 0 || len(res.FailedAndUnresolvableNodes) != 2 {
			t.Fatalf("%s: filter %+v, want both nodes failed unresolvably", pod.Name, res)
		}
		for node, msg := range res.FailedAndUnresolvableNodes {
			if !strings.Contains(msg, want) {
				t.Errorf("%s on %s: reason %q, want it to contain %q", pod.Name, node, msg, want)
			}
		}
		prio, err := e.srv.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")})
		if err != nil {
			t.Fatal(err)
		}
		for _, hp := range prio {
			if hp.Score != 0 {
				t.Errorf("%s: prioritize gives %s %d, want 0", pod.Name, hp.Host, hp.Score)
			}
		}
		bres, err := e.srv.Bind(ctx, &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: "ns", PodUID: pod.UID, Node: "n1"})
		if err != nil || !strings.Contains(bres.Error, want) {
			t.Errorf("%s: bind = %+v, %v; want an error containing %q", pod.Name, bres, err, want)
		}
		if c := calls.Load(); c != 0 {
			t.Errorf("%s: the policy chose %d cards, want none: the pod is refused before any node is evaluated", pod.Name, c)
		}
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("API writes for refused pods: %v", w)
	}

	calls.Store(0)
	res, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: atCap, NodeNames: names("n1", "n2")})
	if err != nil {
		t.Fatal(err)
	}
	if len(*res.NodeNames) != 2 {
		t.Errorf("a pod of exactly %d containers: filter %+v, want both nodes", MaxGPUContainers, res)
	}
	if c := calls.Load(); c != 2*MaxGPUContainers {
		t.Errorf("the policy chose %d cards, want one per container per node (%d)", c, 2*MaxGPUContainers)
	}
	bres, err := e.srv.Bind(ctx, &extenderv1.ExtenderBindingArgs{PodName: atCap.Name, PodNamespace: "ns", PodUID: atCap.UID, Node: "n2"})
	if err != nil || bres.Error != "" {
		t.Fatalf("bind of a pod at the cap: %+v, %v", bres, err)
	}
	if got := len(assignment(t, e.apiPod(t, atCap.Name)).Containers); got != MaxGPUContainers {
		t.Errorf("the record has %d containers, want %d", got, MaxGPUContainers)
	}
}

// Once kube-scheduler gives up on a filter or prioritize call (its request
// context ends: httpTimeout, a closed connection), the extender stops
// evaluating nodes: with 2,000 candidates and the context cancelled while
// the first node is decided, each goroutine decides at most the node it is
// on, and the verb returns the context's error instead of an answer.
func TestVerbsStopEvaluatingWhenTheRequestEnds(t *testing.T) {
	var nodes []*corev1.Node
	var candidates []string
	for i := 0; i < 2000; i++ {
		n := fmt.Sprint("n", i)
		nodes = append(nodes, fixture.MakeNode(n).Card(0, 40).Obj())
		candidates = append(candidates, n)
	}
	pod := podtest.Make("ns", "p").GPU("main", 4).Obj()
	e := newEnv(t, envOpts{}, nodes, pod)
	for _, workers := range []int{0, 2, 4} {
		for _, verb := range []string{"filter", "prioritize"} {
			t.Run(fmt.Sprintf("%s/workers=%d", verb, workers), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var calls atomic.Int64
				e.srv.policy = countingPolicy(t, &calls, cancel)
				e.srv.workers = workers
				args := &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &candidates}
				var err error
				if verb == "filter" {
					_, err = e.srv.Filter(ctx, args)
				} else {
					_, err = e.srv.Prioritize(ctx, args)
				}
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				most := int64(max(workers, 1))
				if c := calls.Load(); c < 1 || c > most {
					t.Errorf("%d of %d nodes evaluated after the request ended, want at most %d (one per goroutine)", c, len(candidates), most)
				}
			})
		}
	}
	// And a call that arrives already cancelled evaluates nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var calls atomic.Int64
	e.srv.policy = countingPolicy(t, &calls, nil)
	if _, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &candidates}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if c := calls.Load(); c != 0 {
		t.Errorf("%d nodes evaluated for a cancelled request, want 0", c)
	}
}
