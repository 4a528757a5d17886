package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func names(ns ...string) *[]string {
	if ns == nil {
		ns = []string{}
	}
	return &ns
}

func TestFilter(t *testing.T) {
	// half: 40 GiB card with 30 used; empty: 40 GiB card; big: 80 GiB card;
	// small: 16 GiB card; sick: unhealthy + isolated cards; bare: no inventory.
	nodes := []*corev1.Node{
		fixture.MakeNode("half").Card(0, 40).Obj(),
		fixture.MakeNode("empty").Card(0, 40).Obj(),
		fixture.MakeNode("big").Card(0, 80).Obj(),
		fixture.MakeNode("small").Card(0, 16).Obj(),
		fixture.MakeNode("sick").CardOf(0, 80, "A100", api.CardUnhealthy).CardOf(1, 80, "A100", api.CardIsolated).Obj(),
		fixture.MakeNode("bare").NoInventory().Obj(),
		fixture.MakeNode("full").Card(0, 24).Card(1, 24).Card(2, 24).Card(3, 24).Obj(),
	}
	pods := []*corev1.Pod{
		podtest.Make("ns", "resident").GPU("main", 30).AssignOn("half", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "f0").GPU("main", 24).AssignOn("full", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "f1").GPU("main", 24).AssignOn("full", api.PhaseAllocated, 1).Obj(),
		podtest.Make("ns", "f2").GPU("main", 24).AssignOn("full", api.PhaseAllocated, 2).Obj(),
		podtest.Make("ns", "f3").GPU("main", 4).AssignOn("full", api.PhaseAllocated, 3).Obj(),
	}
	tests := []struct {
		name  string
		mode  FilterMode
		pod   *corev1.Pod
		nodes []string
		want  *extenderv1.ExtenderFilterResult
	}{
		{
			name:  "best mode keeps only the policy's preferred node; other fitting nodes are in neither failed list",
			pod:   podtest.Make("ns", "p").GPU("main", 10).Obj(),
			nodes: []string{"half", "empty", "big"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:                  names("half"),
				FailedNodes:                extenderv1.FailedNodesMap{},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			},
		},
		{
			name:  "all mode keeps every fitting node",
			mode:  FilterAll,
			pod:   podtest.Make("ns", "p").GPU("main", 10).Obj(),
			nodes: []string{"half", "empty", "big"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:                  names("half", "empty", "big"),
				FailedNodes:                extenderv1.FailedNodesMap{},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			},
		},
		{
			name:  "exact fit fills a card to the last unit",
			pod:   podtest.Make("ns", "p").GPU("main", 10).Obj(),
			nodes: []string{"half"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:                  names("half"),
				FailedNodes:                extenderv1.FailedNodesMap{},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			},
		},
		{
			name:  "full cards fail resolvably with the largest free card named; too-small cards fail unresolvably",
			pod:   podtest.Make("ns", "p").GPU("main", 24).Obj(),
			nodes: []string{"half", "full", "small", "big"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames: names("big"),
				FailedNodes: extenderv1.FailedNodesMap{
					"half": `no single card has 24 GiB free for container "main"; largest free is 10 GiB on card 0`,
					"full": `no single card has 24 GiB free for container "main"; largest free is 20 GiB on card 3`,
				},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{
					"small": `container "main" asks for 24 GiB, more than any card holds (largest is 16 GiB)`,
				},
			},
		},
		{
			name:  "unhealthy and isolated cards, a node without inventory and an unknown node fail unresolvably",
			pod:   podtest.Make("ns", "p").GPU("main", 8).Obj(),
			nodes: []string{"sick", "bare", "ghost"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:   names(),
				FailedNodes: extenderv1.FailedNodesMap{},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{
					"sick":  `no schedulable GPU for container "main" (2 cards: 1 unhealthy, 1 isolated)`,
					"bare":  "GPU inventory unusable: node bare: node has no gpushare.example.com/inventory annotation (is the gpushare device plugin running on it?)",
					"ghost": "node unknown to the gpushare extender: ghost",
				},
			},
		},
		{
			name:  "multi-container pod needs a card for each container",
			pod:   podtest.Make("ns", "p").GPU("a", 30).GPU("b", 20).Obj(),
			nodes: []string{"empty", "big"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:                  names("big"),
				FailedNodes:                extenderv1.FailedNodesMap{"empty": `no single card has 20 GiB free for container "b"; largest free is 10 GiB on card 0`},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{mode: tc.mode}, nodes, pods...)
			got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: &tc.nodes})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilterCapsTiedBestNodes(t *testing.T) {
	// 40 empty nodes tie for best under binpack; "used" is strictly better
	// for binpack, "tiny" does not fit.
	var nodes []*corev1.Node
	var all []string
	for i := 0; i < 40; i++ {
		n := fmt.Sprintf("n%02d", i)
		nodes = append(nodes, fixture.MakeNode(n).Card(0, 40).Obj())
		all = append(all, n)
	}
	nodes = append(nodes, fixture.MakeNode("tiny").Card(0, 4).Obj())
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	candidates := append(slices.Clone(all), "tiny")
	tests := []struct {
		name     string
		policy   string
		maxBest  int
		wantKept int
	}{
		{"no cap keeps every tied node", "spread", 0, 40},
		{"a cap keeps that many of the tied nodes", "spread", 16, 16},
		{"a cap of one leaves kube-scheduler one node", "spread", 1, 1},
		{"a cap above the ties keeps them all", "spread", 64, 40},
		{"a cap never keeps a node that is not best", "binpack", 16, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := nodes
			var pods []*corev1.Pod
			if tc.policy == "binpack" {
				pods = append(pods, podtest.Make("ns", "resident").GPU("main", 10).AssignOn("n07", api.PhaseAllocated, 0).Obj())
			}
			e := newEnv(t, envOpts{policy: tc.policy, maxBest: tc.maxBest}, ns, pods...)
			seen := map[string]bool{}
			for round := 0; round < 20; round++ {
				got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &candidates})
				if err != nil {
					t.Fatal(err)
				}
				kept := *got.NodeNames
				if len(kept) != tc.wantKept {
					t.Fatalf("kept %d nodes %v, want %d", len(kept), kept, tc.wantKept)
				}
				if !slices.IsSorted(kept) {
					t.Errorf("kept nodes %v are not in the candidates' order", kept)
				}
				for _, n := range kept {
					if !slices.Contains(all, n) || (tc.policy == "binpack" && n != "n07") {
						t.Errorf("kept %q, which is not a best node", n)
					}
					seen[n] = true
				}
				want := extenderv1.FailedNodesMap{"tiny": `container "main" asks for 10 GiB, more than any card holds (largest is 4 GiB)`}
				if diff := cmp.Diff(want, got.FailedAndUnresolvableNodes); diff != "" || len(got.FailedNodes) != 0 {
					t.Errorf("failed lists: unresolvable (-want +got):\n%s\nresolvable: %v", diff, got.FailedNodes)
				}
			}
			if tc.wantKept < 40 && tc.policy == "spread" && len(seen) <= tc.wantKept {
				t.Errorf("20 calls kept only %d distinct nodes: the sample is not random", len(seen))
			}
		})
	}
}

func TestFilterPodWithoutGPUPassesUntouched(t *testing.T) {
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj(), fixture.MakeNode("cpu").NoGPU().Obj()})
	pod := podtest.Make("ns", "web").Container("main").Obj()
	nn := []string{"n1", "cpu", "not-in-cache"}
	got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nn})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&extenderv1.ExtenderFilterResult{NodeNames: &nn}, got); diff != "" {
		t.Errorf("filter (-want +got):\n%s", diff)
	}
}

func TestFilterInvalidDemandFailsEveryNodeUnresolvably(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"init container asks for gpu-mem", podtest.Make("ns", "p").InitGPU("setup", 4).GPU("main", 4).Obj(),
			`init containers may not request example.com/gpu-mem: init container "setup" asks for 4`},
		{"negative request", podtest.Make("ns", "p").GPUQuantity("main", "-2").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for -2, which is negative`},
		{"fractional request", podtest.Make("ns", "p").GPUQuantity("main", "1500m").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for 1500m, which is not a whole number of units`},
		{"explicit zero request", podtest.Make("ns", "p").GPUQuantity("main", "0").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for 0; ask for at least 1, or leave example.com/gpu-mem out to ask for no GPU`},
		{"absurd request", podtest.Make("ns", "p").GPUQuantity("main", "4Ti").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for 4Ti, more than the maximum 1099511627776 units`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj(), fixture.MakeNode("n2").Card(0, 40).Obj()})
			got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: names("n1", "n2")})
			if err != nil {
				t.Fatal(err)
			}
			want := &extenderv1.ExtenderFilterResult{
				NodeNames:                  names(),
				FailedNodes:                extenderv1.FailedNodesMap{},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"n1": tc.want, "n2": tc.want},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilterWithNodeObjects(t *testing.T) {
	n1 := fixture.MakeNode("n1").Card(0, 40).Obj()
	n2 := fixture.MakeNode("n2").Card(0, 8).Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{n1, n2})
	got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{
		Pod:   podtest.Make("ns", "p").GPU("main", 10).Obj(),
		Nodes: &corev1.NodeList{Items: []corev1.Node{*n1, *n2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &extenderv1.ExtenderFilterResult{
		Nodes:                      &corev1.NodeList{Items: []corev1.Node{*n1}},
		FailedNodes:                extenderv1.FailedNodesMap{},
		FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"n2": `container "main" asks for 10 GiB, more than any card holds (largest is 8 GiB)`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("filter (-want +got):\n%s", diff)
	}
}

func TestPrioritize(t *testing.T) {
	nodes := []*corev1.Node{
		fixture.MakeNode("quarter").Card(0, 40).Obj(),
		fixture.MakeNode("empty").Card(0, 40).Obj(),
		fixture.MakeNode("half").Card(0, 40).Obj(),
		fixture.MakeNode("small").Card(0, 8).Obj(),
	}
	pods := []*corev1.Pod{
		podtest.Make("ns", "q").GPU("main", 10).AssignOn("quarter", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "h").GPU("main", 20).AssignOn("half", api.PhaseAllocated, 0).Obj(),
	}
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	tests := []struct {
		name   string
		policy string
		pod    *corev1.Pod
		want   extenderv1.HostPriorityList
	}{
		{"binpack prefers the fullest node", "binpack", pod,
			extenderv1.HostPriorityList{{Host: "quarter", Score: 5}, {Host: "empty", Score: 0}, {Host: "half", Score: 10}, {Host: "small", Score: 0}}},
		{"spread prefers the emptiest node", "spread", pod,
			extenderv1.HostPriorityList{{Host: "quarter", Score: 5}, {Host: "empty", Score: 10}, {Host: "half", Score: 0}, {Host: "small", Score: 0}}},
		{"a pod without gpu-mem scores 0 everywhere", "binpack", podtest.Make("ns", "web").Container("c").Obj(),
			extenderv1.HostPriorityList{{Host: "quarter"}, {Host: "empty"}, {Host: "half"}, {Host: "small"}}},
		{"an invalid demand scores 0 everywhere", "binpack", podtest.Make("ns", "bad").InitGPU("i", 1).Obj(),
			extenderv1.HostPriorityList{{Host: "quarter"}, {Host: "empty"}, {Host: "half"}, {Host: "small"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{policy: tc.policy}, nodes, pods...)
			got, err := e.srv.Prioritize(context.Background(), &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: names("quarter", "empty", "half", "small")})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("prioritize (-want +got):\n%s", diff)
			}
		})
	}
}
