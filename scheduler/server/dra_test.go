package server

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// fakeDRA serves fixed DRA nodes and one demand for pods with claims.
type fakeDRA struct {
	nodes map[string]*allocator.Node
	units int64
	err   error
}

func (f fakeDRA) Request(pod *corev1.Pod) (allocator.Request, bool, error) {
	if f.err != nil {
		return allocator.Request{}, true, f.err
	}
	return allocator.Request{Demands: []allocator.Demand{{Container: "gpu", Units: f.units}}}, true, nil
}

func (f fakeDRA) Nodes(names []string) []*allocator.Node {
	out := make([]*allocator.Node, len(names))
	for i, n := range names {
		out[i] = f.nodes[n]
	}
	return out
}

func draNode(name string, used ...int64) *allocator.Node {
	n := &allocator.Node{Name: name, Unit: api.UnitGiB}
	for i, u := range used {
		n.Cards = append(n.Cards, allocator.Card{Index: i, UUID: name + "-" + string(rune('0'+i)), Model: "A100", Capacity: 40, Used: u, State: api.CardHealthy})
	}
	return n
}

// The DRA verb scores nodes for a pod with claims as frag does after the
// DRA allocator's first-fit card: the node whose first card the claim
// fills exactly beats the empty node and the node it would fragment; a node
// the driver serves nothing of, a pod without claims and a demand the view
// cannot read score 0 everywhere.
func TestPrioritizeDRAScoresNodesForClaimsWithFragAfterFirstFit(t *testing.T) {
	nodes := map[string]*allocator.Node{
		"exact": draNode("exact", 30, 40), // 10 free on card 0: the claim fills it
		"empty": draNode("empty", 0, 0),
		"frags": draNode("frags", 25, 40), // 15 free: 5 stranded after
	}
	names := []string{"frags", "empty", "exact", "plain"}
	claimPod := podtest.Make("ns", "claimant").Obj()
	claimPod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	plain := podtest.Make("ns", "plain").Obj()

	e := newEnv(t, envOpts{dra: fakeDRA{nodes: nodes, units: 10}}, []*corev1.Node{fixture.MakeNode("plain").Card(0, 40).Obj()})
	got, err := e.srv.PrioritizeDRA(context.Background(), &extenderv1.ExtenderArgs{Pod: claimPod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	score := map[string]int64{}
	for _, h := range got {
		score[h.Host] = h.Score
	}
	if len(got) != len(names) || !(score["exact"] > score["frags"] && score["exact"] > score["empty"]) || score["plain"] != 0 || score["exact"] != extenderv1.MaxExtenderPriority {
		t.Errorf("scores %v: want exact best (%d), above frags and empty, plain 0", score, extenderv1.MaxExtenderPriority)
	}
	t.Logf("scores %v", score)

	for name, tc := range map[string]struct {
		pod *corev1.Pod
		dra DRA
	}{
		"a pod without claims":   {plain, fakeDRA{nodes: nodes, units: 10}},
		"an unreadable demand":   {claimPod, fakeDRA{nodes: nodes, err: errors.New("claim not found")}},
		"no DRA view configured": {claimPod, nil},
	} {
		e := newEnv(t, envOpts{dra: tc.dra}, nil)
		got, err := e.srv.PrioritizeDRA(context.Background(), &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: &names})
		if err != nil || len(got) != len(names) {
			t.Fatalf("%s: %v, %v", name, got, err)
		}
		for _, h := range got {
			if h.Score != 0 {
				t.Errorf("%s: %s scores %d, want 0", name, h.Host, h.Score)
			}
		}
	}

	// Over HTTP, as kube-scheduler calls it.
	rec := do(t, e.srv.Handler(nil), "POST", "/dra/prioritize", mustJSON(t, &extenderv1.ExtenderArgs{Pod: claimPod, NodeNames: &names}))
	if rec.Code != 200 {
		t.Fatalf("POST /dra/prioritize: %d %s", rec.Code, rec.Body)
	}
}
