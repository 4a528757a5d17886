package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

	// Over HTTP, as kube-scheduler calls it: the scores for a pod with
	// claims; an empty list, the candidates unread, for a pod without;
	// malformed bodies refused.
	e = newEnv(t, envOpts{dra: fakeDRA{nodes: nodes, units: 10}}, nil)
	h := e.srv.Handler(nil)
	rec := do(t, h, "POST", "/dra/prioritize", mustJSON(t, &extenderv1.ExtenderArgs{Pod: claimPod, NodeNames: &names}))
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); rec.Code != 200 || err != nil || len(list) != len(names) || list[2].Host != "exact" || list[2].Score != extenderv1.MaxExtenderPriority {
		t.Errorf("POST /dra/prioritize, a pod with claims: %d %s (%v)", rec.Code, rec.Body, err)
	}
	plainBody := `{"Pod": ` + mustJSON(t, plain) + `, "NodeNames": {"not": "a list, and never read"}}`
	if rec := do(t, h, "POST", "/dra/prioritize", plainBody); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != "[]" {
		t.Errorf("POST /dra/prioritize, a pod without claims: %d %s, want 200 []", rec.Code, rec.Body)
	}
	for body, want := range map[string]string{
		`{"NodeNames": ["a"]}`: "Pod is missing",
		`{"Pod": ` + mustJSON(t, claimPod) + `, "NodeNames": 5}`: "malformed JSON",
		`{"Pod": ` + mustJSON(t, claimPod) + `}`:                 "neither NodeNames nor Nodes is set",
		`{"Pod": `:                                               "malformed JSON",
	} {
		if rec := do(t, h, "POST", "/dra/prioritize", body); rec.Code != 400 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("POST /dra/prioritize %s: %d %s, want 400 naming %q", body, rec.Code, rec.Body, want)
		}
	}
}

// BenchmarkPrioritizeDRA: one DRA prioritize call over n nodes of 8
// cards, for a pod with claims (every node scored) and for a pod without
// (what every other pod costs when kube-scheduler calls the verb for all
// pods), decoding included (over the handler, as kube-scheduler posts it).
func BenchmarkPrioritizeDRA(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		nodes := map[string]*allocator.Node{}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("node-%05d", i)
			used := make([]int64, 8)
			for c := range used {
				used[c] = int64((i*7 + c*13) % 41)
			}
			nodes[names[i]] = draNode(names[i], used...)
			nodes[names[i]].Summarize()
		}
		e := newEnv(b, envOpts{dra: fakeDRA{nodes: nodes, units: 10}}, nil)
		h := e.srv.Handler(nil)
		claimPod := podtest.Make("ns", "claimant").Obj()
		claimPod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		for _, tc := range []struct {
			name string
			pod  *corev1.Pod
		}{{"claims", claimPod}, {"no-claims", podtest.Make("ns", "plain").Obj()}} {
			body := mustJSON(b, &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: &names})
			b.Run(fmt.Sprintf("nodes=%d/pod=%s", n, tc.name), func(b *testing.B) {
				for b.Loop() {
					if rec := do(b, h, "POST", "/dra/prioritize", body); rec.Code != 200 {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
		}
	}
}
