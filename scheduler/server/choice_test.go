package server

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

const (
	modelH100 = "NVIDIA H100 80GB HBM3"
	modelA100 = "NVIDIA A100-SXM4-40GB"
	modelL4   = "NVIDIA L4"
)

// choiceNodes: h100 (two H100, card 0 full), a100 (two A100 40GB, 10 used
// on each), l4 (one L4).
func choiceNodes() ([]*corev1.Node, []*corev1.Pod) {
	nodes := []*corev1.Node{
		fixture.MakeNode("h100").CardOf(0, 80, modelH100, api.CardHealthy).CardOf(1, 80, modelH100, api.CardHealthy).Obj(),
		fixture.MakeNode("a100").CardOf(0, 40, modelA100, api.CardHealthy).CardOf(1, 40, modelA100, api.CardHealthy).Obj(),
		fixture.MakeNode("l4").CardOf(0, 24, modelL4, api.CardHealthy).Obj(),
	}
	pods := []*corev1.Pod{
		podtest.Make("ns", "h100-full").GPU("main", 80).AssignOn("h100", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "a100-part").GPU("main", 10).AssignOn("a100", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "a100-part2").GPU("main", 10).AssignOn("a100", api.PhaseAllocated, 1).Obj(),
	}
	return nodes, pods
}

func TestFilterAndBindObeyThePodsCardChoice(t *testing.T) {
	all := []string{"h100", "a100", "l4"}
	tests := []struct {
		name string
		ann  map[string]string
		// units asked by the pod's one container.
		units int64
		// kept: the nodes filter keeps (FilterAll); failed and
		// unresolvable: a part of each node's message.
		kept         []string
		failed       map[string]string
		unresolvable map[string]string
		// bindNode/bindCard: where bind puts the pod ("" skips).
		bindNode string
		bindCard int
	}{
		{
			name: "allowed model: only the node with that model", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}, units: 20,
			kept: []string{"h100"},
			unresolvable: map[string]string{
				"a100": `no card of model "H100" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA A100-SXM4-40GB`,
				"l4":   `no card of model "H100" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA L4`,
			},
			bindNode: "h100", bindCard: 1,
		},
		{
			name: "a model nowhere: every node says which models it has", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "B200"}, units: 1,
			unresolvable: map[string]string{
				"h100": `no card of model "B200" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA H100 80GB HBM3`,
				"a100": "models here: NVIDIA A100-SXM4-40GB",
				"l4":   "models here: NVIDIA L4",
			},
		},
		{
			name: "excluded models", ann: map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "H100|A100"}, units: 4,
			kept: []string{"l4"},
			unresolvable: map[string]string{
				"h100": `every card the pod could take on this node is of an excluded model (exclude-card-models "H100|A100"); models here: NVIDIA H100 80GB HBM3`,
				"a100": "of an excluded model",
			},
			bindNode: "l4", bindCard: 0,
		},
		{
			// binpack would take card 0 (the lower index of a tie); the pod names card 1.
			name: "a card by UUID: only its node, and that card", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): podtest.CardUUID("a100", 1)}, units: 5,
			kept: []string{"a100"},
			unresolvable: map[string]string{
				"h100": `card GPU-a100-1 is not on this node (annotation gpushare.example.com/card-uuids)`,
				"l4":   `card GPU-a100-1 is not on this node`,
			},
			bindNode: "a100", bindCard: 1,
		},
		{
			name: "a UUID nowhere", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): "GPU-gone"}, units: 5,
			unresolvable: map[string]string{"h100": "card GPU-gone is not on this node", "a100": "card GPU-gone is not on this node", "l4": "card GPU-gone is not on this node"},
		},
		{
			name: "all chosen cards full: resolvable, preemption may help", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}, units: 81,
			unresolvable: map[string]string{"a100": "no card of model", "l4": "no card of model",
				"h100": `container "main" asks for 81 GiB, more than any card of those the pod chose (card-models "H100") holds (largest is 80 GiB)`},
		},
		{
			name: "the chosen cards are too full", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "A100"}, units: 35,
			failed:       map[string]string{"a100": `no single card of those the pod chose (card-models "A100") has 35 GiB free for container "main"; largest free is 30 GiB on card 0`},
			unresolvable: map[string]string{"h100": "no card of model", "l4": "no card of model"},
		},
		{
			name: "a malformed annotation: every node, unresolvable, saying what to write", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "H100||A100"}, units: 1,
			unresolvable: map[string]string{
				"h100": `invalid gpushare pod annotation: gpushare.example.com/card-models "H100||A100" has an empty entry: separate entries with one "|" or ","`,
				"a100": "has an empty entry", "l4": "has an empty entry",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := choiceNodes()
			pw := podtest.Make("ns", "p").UID("uid-p").GPU("main", tc.units)
			for k, v := range tc.ann {
				pw.Annotation(k, v)
			}
			pod := pw.Obj()
			e := newEnv(t, envOpts{mode: FilterAll}, nodes, append(pods, pod)...)
			res, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names(all...)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.kept, *res.NodeNames, cmp.Transformer("nilEmpty", func(s []string) []string {
				if len(s) == 0 {
					return nil
				}
				return s
			})); diff != "" {
				t.Errorf("kept nodes (-want +got):\n%s", diff)
			}
			check := func(kind string, got extenderv1.FailedNodesMap, want map[string]string) {
				t.Helper()
				if len(got) != len(want) {
					t.Errorf("%s: %v, want nodes %v", kind, got, want)
				}
				for n, part := range want {
					if !strings.Contains(got[n], part) {
						t.Errorf("%s %s: %q, want it to contain %q", kind, n, got[n], part)
					}
				}
			}
			check("FailedNodes", res.FailedNodes, tc.failed)
			check("FailedAndUnresolvableNodes", res.FailedAndUnresolvableNodes, tc.unresolvable)
			if tc.bindNode == "" {
				return
			}
			br, err := e.srv.Bind(context.Background(), bindArgs(pod, tc.bindNode))
			if err != nil || br.Error != "" {
				t.Fatalf("bind: %v %s", err, br.Error)
			}
			if got := assignment(t, e.apiPod(t, "p")).Containers[0]; got.CardIndex != tc.bindCard {
				t.Errorf("bound on card %d, want %d", got.CardIndex, tc.bindCard)
			}
		})
	}
}

func TestBindRefusesACardTheChoiceExcludes(t *testing.T) {
	nodes, pods := choiceNodes()
	pod := podtest.Make("ns", "p").UID("uid-p").GPU("main", 4).Annotation(api.DefaultNames().AnnotationCardModels(), "H100").Obj()
	e := newEnv(t, envOpts{}, nodes, append(pods, pod)...)
	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "l4"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `pod no longer fits on node l4: no card of model "H100" on this node`; !strings.Contains(res.Error, want) {
		t.Errorf("bind error %q, want it to contain %q", res.Error, want)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
}

// Two nodes: busy (one 40 GiB card with 30 used) and idle (one empty 40 GiB
// card), and a node of two cards with 10 and 0 used.
func policyNodes() ([]*corev1.Node, []*corev1.Pod) {
	nodes := []*corev1.Node{
		fixture.MakeNode("busy").Card(0, 40).Obj(),
		fixture.MakeNode("idle").Card(0, 40).Obj(),
		fixture.MakeNode("two").Card(0, 40).Card(1, 40).Obj(),
	}
	pods := []*corev1.Pod{
		podtest.Make("ns", "r1").GPU("main", 30).AssignOn("busy", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "r2").GPU("main", 10).AssignOn("two", api.PhaseAllocated, 0).Obj(),
	}
	return nodes, pods
}

func TestPerPodPolicyDecidesNodeAndCard(t *testing.T) {
	tests := []struct {
		name       string
		policy     string // the pod's annotation; "" none
		wantNode   string // filter (best mode) between busy and idle
		wantScores map[string]int64
		wantCard   int // bind on "two"
	}{
		{name: "no annotation: the default binpack, fullest node and card", wantNode: "busy", wantScores: map[string]int64{"busy": 10, "idle": 0}, wantCard: 0},
		{name: "binpack named: the same", policy: "binpack", wantNode: "busy", wantScores: map[string]int64{"busy": 10, "idle": 0}, wantCard: 0},
		{name: "spread: emptiest node and card", policy: "spread", wantNode: "idle", wantScores: map[string]int64{"busy": 0, "idle": 10}, wantCard: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := policyNodes()
			pw := podtest.Make("ns", "p").UID("uid-p").GPU("main", 5)
			if tc.policy != "" {
				pw.Annotation(api.DefaultNames().AnnotationPolicy(), tc.policy)
			}
			pod := pw.Obj()
			e := newEnv(t, envOpts{allowed: []string{"spread"}}, nodes, append(pods, pod)...)
			ctx := context.Background()
			res, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("busy", "idle")})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.wantNode}, *res.NodeNames); diff != "" {
				t.Errorf("filter kept (-want +got):\n%s", diff)
			}
			// The other node fits but is not best: in neither failed list.
			if len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != 0 {
				t.Errorf("failed nodes %v, unresolvable %v; want none (a fitting node that is not best is left out)", res.FailedNodes, res.FailedAndUnresolvableNodes)
			}
			scores, err := e.srv.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("busy", "idle")})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, h := range scores {
				got[h.Host] = h.Score
			}
			if diff := cmp.Diff(tc.wantScores, got); diff != "" {
				t.Errorf("prioritize (-want +got):\n%s", diff)
			}
			br, err := e.srv.Bind(ctx, bindArgs(pod, "two"))
			if err != nil || br.Error != "" {
				t.Fatalf("bind: %v %s", err, br.Error)
			}
			if got := assignment(t, e.apiPod(t, "p")).Containers[0].CardIndex; got != tc.wantCard {
				t.Errorf("bound on card %d, want %d", got, tc.wantCard)
			}
		})
	}
}

func TestAPolicyNotAllowedIsUnresolvableAndNamesTheAllowedOnes(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		policy  string
		want    string
	}{
		{
			name: "by default only the default policy is allowed", policy: "spread",
			want: `policy not allowed: the pod's annotation gpushare.example.com/policy names "spread", which this cluster's operator does not allow (the extender's --allowed-policies): allowed here are binpack; name one of those or remove the annotation`,
		},
		{
			name: "a known policy outside the allowed set", allowed: []string{"spread", "bestfit"}, policy: "frag",
			want: `names "frag", which this cluster's operator does not allow (the extender's --allowed-policies): allowed here are bestfit, binpack, spread`,
		},
		{
			name: "an unknown policy", allowed: []string{"spread"}, policy: "tetris",
			want: `names "tetris", which is no policy: allowed here are binpack, spread (known policies: bestfit, binpack, fgd, frag, spread)`,
		},
		{
			name: "an empty policy annotation", allowed: []string{"spread"}, policy: " ",
			want: `gpushare.example.com/policy is empty: name a policy (e.g. "spread") or remove the annotation`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := policyNodes()
			pod := podtest.Make("ns", "p").UID("uid-p").GPU("main", 5).Annotation(api.DefaultNames().AnnotationPolicy(), tc.policy).Obj()
			e := newEnv(t, envOpts{allowed: tc.allowed}, nodes, append(pods, pod)...)
			ctx := context.Background()
			res, err := e.srv.Filter(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("busy", "idle")})
			if err != nil {
				t.Fatal(err)
			}
			if len(*res.NodeNames) != 0 || len(res.FailedNodes) != 0 || len(res.FailedAndUnresolvableNodes) != 2 {
				t.Fatalf("filter %+v, want both nodes failed unresolvably", res)
			}
			for n, msg := range res.FailedAndUnresolvableNodes {
				if !strings.Contains(msg, tc.want) {
					t.Errorf("node %s: %q, want it to contain %q", n, msg, tc.want)
				}
			}
			scores, err := e.srv.Prioritize(ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("busy", "idle")})
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range scores {
				if h.Score != 0 {
					t.Errorf("prioritize %s = %d, want 0", h.Host, h.Score)
				}
			}
			br, err := e.srv.Bind(ctx, bindArgs(pod, "idle"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(br.Error, tc.want) {
				t.Errorf("bind error %q, want it to contain %q", br.Error, tc.want)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("writes %v, want none", w)
			}
		})
	}
}

func TestNewRefusesANilAllowedPolicy(t *testing.T) {
	nodes, _ := policyNodes()
	e := newEnv(t, envOpts{}, nodes)
	cfg := Config{Cache: e.cache, Client: e.client, Policy: e.srv.policy, AllowedPolicies: []*allocator.Policy{nil}}
	if _, err := New(cfg); err == nil {
		t.Error("New accepted a nil allowed policy")
	}
}
