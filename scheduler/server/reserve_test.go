package server

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// burstNodes: n1 (cards of 16 GiB, 2 GiB of card 0 held) holds four pods of
// 6 GiB by card, five by its node total (32 - 2 = 30); n2 (one empty 40 GiB
// card) is binpack's second choice.
func burstNodes() ([]*corev1.Node, *corev1.Pod) {
	return []*corev1.Node{fixture.MakeNode("n1").Card(0, 16).Card(1, 16).Obj(), fixture.MakeNode("n2").Card(0, 40).Obj()},
		podtest.Make("ns", "resident").GPU("main", 2).AssignOn("n1", api.PhaseAllocated, 0).Obj()
}

// kube-scheduler filters the next pods of a burst while the binds of the
// ones before are in flight. The filter must see them: the fifth pod of 6 GiB
// goes to n2, where without reservations it was sent to n1 as well and its
// bind failed with "no longer fits" (then waited for kube-scheduler's retry).
func TestFilterSeesThePodsWhoseBindsAreInFlight(t *testing.T) {
	nodes, resident := burstNodes()
	var pods []*corev1.Pod
	for i := range 5 {
		pods = append(pods, podtest.Make("ns", fmt.Sprintf("p%d", i)).GPU("main", 6).Obj())
	}
	e := newEnv(t, envOpts{}, nodes, append(pods, resident)...)
	var kept []string
	for _, p := range pods {
		fr, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: p, NodeNames: names("n1", "n2")})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, fmt.Sprint(*fr.NodeNames))
	}
	if diff := cmp.Diff([]string{"[n1]", "[n1]", "[n1]", "[n1]", "[n2]"}, kept); diff != "" {
		t.Errorf("nodes each filter kept, no bind done yet (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]int64{0: 14, 1: 12}, e.usedOn("n1")); diff != "" {
		t.Errorf("n1 with four pods' cards reserved (-want +got):\n%s", diff)
	}
	// The binds, all at once: each claims its reservation.
	var wg sync.WaitGroup
	results := make([]string, len(pods))
	for i, p := range pods {
		wg.Go(func() {
			res, err := e.srv.Bind(context.Background(), bindArgs(p, []string{"n1", "n1", "n1", "n1", "n2"}[i]))
			results[i] = fmt.Sprint(err, res)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r != "<nil> &{}" {
			t.Errorf("bind of %s: %s", pods[i].Name, r)
		}
	}
	if n := testutil.ToFloat64(e.srv.metrics.binds.WithLabelValues(outcomeBound)); n != 5 {
		t.Errorf("bound counter = %v, want 5", n)
	}
	if diff := cmp.Diff(map[int]int64{0: 14, 1: 12}, e.usedOn("n1")); diff != "" {
		t.Errorf("n1 after the binds (-want +got):\n%s", diff)
	}
}

// A pod filtered again (kube-scheduler's retry) does not count its own
// earlier reservation; in filter mode "all" (kube-scheduler chooses among
// several nodes) nothing is reserved.
func TestFilterReservesOncePerPodAndOnlyWhenItKeepsOneNode(t *testing.T) {
	// n1 has room for this one pod (binpack's choice): counting its own
	// reservation, a second filter would send it to n2.
	nodes := []*corev1.Node{fixture.MakeNode("n1").Card(0, 16).Obj(), fixture.MakeNode("n2").Card(0, 40).Obj()}
	resident := podtest.Make("ns", "resident").GPU("main", 10).AssignOn("n1", api.PhaseAllocated, 0).Obj()
	pod := podtest.Make("ns", "p").GPU("main", 6).Obj()
	e := newEnv(t, envOpts{}, nodes, pod, resident)
	for i := range 3 {
		fr, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")})
		if err != nil || fmt.Sprint(*fr.NodeNames) != "[n1]" {
			t.Fatalf("filter %d: %v %v, want [n1]", i+1, fr, err)
		}
	}
	if diff := cmp.Diff(map[int]int64{0: 16}, e.usedOn("n1")); diff != "" {
		t.Errorf("n1 after three filters of one pod (-want +got):\n%s", diff)
	}

	all := newEnv(t, envOpts{mode: FilterAll}, nodes, pod, resident)
	if _, err := all.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]int64{0: 10}, all.usedOn("n1")); diff != "" {
		t.Errorf("filter mode all reserved cards (-want +got):\n%s", diff)
	}
}
