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
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func TestFilterWholeCards(t *testing.T) {
	// withshare: card 0 holds 10 GiB shared; heldwhole: card 0 is given
	// whole to another pod; one: a single card; free: three empty cards;
	// sick: one healthy card and one unhealthy.
	nodes := []*corev1.Node{
		fixture.MakeNode("withshare").Card(0, 40).Card(1, 40).Obj(),
		fixture.MakeNode("heldwhole").Card(0, 40).Card(1, 40).Obj(),
		fixture.MakeNode("one").Card(0, 40).Obj(),
		fixture.MakeNode("free").Card(0, 40).Card(1, 40).Card(2, 40).Obj(),
		fixture.MakeNode("sick").Card(0, 40).CardOf(1, 40, "A100", api.CardUnhealthy).Obj(),
	}
	pods := []*corev1.Pod{
		podtest.Make("ns", "share").GPU("main", 10).AssignOn("withshare", api.PhaseAllocated, 0).Obj(),
		podtest.Make("ns", "holder").Whole("main", 1).AssignWholeOn("heldwhole", api.PhaseAllocated, nil, []int{0}).Obj(),
	}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []string
		want  *extenderv1.ExtenderFilterResult
	}{
		{
			name:  "a whole-card pod never lands on a card with shared memory, nor on one held whole; too few cards is unresolvable",
			pod:   podtest.Make("ns", "p").Whole("train", 2).Obj(),
			nodes: []string{"withshare", "heldwhole", "one", "free", "sick"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames: names("free"),
				FailedNodes: extenderv1.FailedNodesMap{
					"withshare": `container "train" needs 2 free whole cards; node has 1 (of 2 usable: 1 with shared memory)`,
					"heldwhole": `container "train" needs 2 free whole cards; node has 1 (of 2 usable: 1 held whole)`,
				},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{
					"one":  "the pod asks for 2 whole cards, more than the node's 1 usable cards",
					"sick": "the pod asks for 2 whole cards, more than the node's 1 usable cards",
				},
			},
		},
		{
			name:  "a shared pod never lands on a card held whole",
			pod:   podtest.Make("ns", "p").GPU("main", 35).Obj(),
			nodes: []string{"heldwhole", "withshare"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:                  names("heldwhole"),
				FailedNodes:                extenderv1.FailedNodesMap{}, // withshare fits, not best: in neither list
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
			},
		},
		{
			name:  "a mixed pod needs its shares beside its whole cards",
			pod:   podtest.Make("ns", "p").GPU("infer", 40).Whole("train", 1).Obj(),
			nodes: []string{"heldwhole", "one"},
			want: &extenderv1.ExtenderFilterResult{
				NodeNames:   names(),
				FailedNodes: extenderv1.FailedNodesMap{"heldwhole": `no single card has 40 GiB free for container "infer"; largest free is 0 GiB on card 0 (1 more taken whole by this pod)`},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{
					"one": `no card left for container "infer": the pod's whole-card containers take all 1 usable cards`,
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{mode: FilterBest}, nodes, pods...)
			got, err := e.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: names(tc.nodes...)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilterInvalidWholeCardDemandFailsEveryNodeUnresolvably(t *testing.T) {
	mixed := podtest.Make("ns", "p").GPU("main", 4).Obj()
	mixed.Spec.Containers[0].Resources.Limits[api.DefaultNames().WholeResourceName()] = podtest.Make("", "").Whole("x", 1).Obj().Spec.Containers[0].Resources.Limits[api.DefaultNames().WholeResourceName()]
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"zero whole cards", podtest.Make("ns", "p").WholeQuantity("main", "0").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for 0 example.com/gpu; ask for at least 1 card, or leave example.com/gpu out to ask for no whole card`},
		{"fractional whole cards", podtest.Make("ns", "p").WholeQuantity("main", "1500m").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for 1500m example.com/gpu, which is not a whole number of cards; for part of a card ask for example.com/gpu-mem (memory) instead`},
		{"negative whole cards", podtest.Make("ns", "p").WholeQuantity("main", "-1").Obj(),
			`invalid example.com/gpu-mem request: container "main" asks for -1 example.com/gpu, which is negative; ask for a whole number of cards from 1 to 256`},
		{"both kinds in one container", mixed,
			`a container may ask for example.com/gpu (whole cards) or example.com/gpu-mem (memory on one card), not both: container "main" asks for both; put the whole cards and the shared memory in separate containers`},
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

func TestBindMixedPodRecordsWholeCardsApartFromShares(t *testing.T) {
	// Card 0 holds a share, so the two whole cards are 1 and 2; the share
	// of the new pod best-fits card 0 (never a card it takes whole).
	resident := podtest.Make("ns", "resident").GPU("main", 30).AssignOn("n1", api.PhaseAllocated, 0).Obj()
	pod := podtest.Make("ns", "p").GPU("infer", 10).Whole("train", 2).Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Card(2, 40).Card(3, 80).Obj()}, pod, resident)
	res, err := e.srv.Bind(context.Background(), bindArgs(pod, "n1"))
	if err != nil || res.Error != "" {
		t.Fatalf("bind: %v %s", err, res.Error)
	}
	want := api.Assignment{Version: 1, PodUID: pod.UID, Node: "n1", Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "infer", CardUUID: podtest.CardUUID("n1", 0), CardIndex: 0, Units: 10}},
		WholeCards: []api.WholeCardAssignment{{Name: "train", CardUUIDs: []string{podtest.CardUUID("n1", 1), podtest.CardUUID("n1", 2)}, CardIndexes: []int{1, 2}}},
	}
	if diff := cmp.Diff(want, assignment(t, e.apiPod(t, "p"))); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
	info := e.cache.Inspect("n1")[0]
	var whole []int
	for _, c := range info.Cards {
		if c.Whole {
			whole = append(whole, c.Index)
			if c.Used != c.Capacity || len(c.Pods) != 1 || !c.Pods[0].Whole || c.Pods[0].Container != "train" {
				t.Errorf("card %d held whole shows %+v", c.Index, c)
			}
		}
	}
	if diff := cmp.Diff([]int{1, 2}, whole); diff != "" {
		t.Errorf("cards held whole in /inspect (-want +got):\n%s", diff)
	}
	body := do(t, e.srv.Handler(e.reg), "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`gpushare_card_held_whole{card="1",node="n1",uuid="GPU-n1-1"} 1`,
		`gpushare_card_held_whole{card="0",node="n1",uuid="GPU-n1-0"} 0`,
		`gpushare_card_used_units{card="2",node="n1",uuid="GPU-n1-2"} 40`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The next whole-card pod takes the last free card; then none is left.
	next := podtest.Make("ns", "next").Whole("main", 1).Obj()
	last := podtest.Make("ns", "last").Whole("main", 1).Obj()
	e2 := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Card(2, 40).Card(3, 80).Obj()}, next, last, resident,
		podtest.Make("ns", "p").GPU("infer", 10).Whole("train", 2).AssignWholeOn("n1", api.PhaseAllocated, []int{0}, []int{1, 2}).Obj())
	if res, err := e2.srv.Bind(context.Background(), bindArgs(next, "n1")); err != nil || res.Error != "" {
		t.Fatalf("bind next: %v %s", err, res.Error)
	}
	if got := assignment(t, e2.apiPod(t, "next")).WholeCards[0].CardIndexes; !cmp.Equal(got, []int{3}) {
		t.Errorf("next pod got cards %v, want [3]", got)
	}
	// The assumed "next" already holds card 3: nothing is left for "last".
	res, err = e2.srv.Bind(context.Background(), bindArgs(last, "n1"))
	if err != nil || !strings.Contains(res.Error, `container "main" needs 1 free whole cards; node has 0 (of 4 usable: 1 with shared memory, 3 held whole)`) {
		t.Fatalf("bind on a node without a free card: %v, %q; want a refusal that says why", err, res.Error)
	}
}
