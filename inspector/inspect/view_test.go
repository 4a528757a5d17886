package inspect

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// TestBuildDoesNotCount covers the pods Build must leave off every card, and
// what it says about each.
func TestBuildDoesNotCount(t *testing.T) {
	gib := makeNode(t, "gpu-g", "10.0.0.1").inventory(api.UnitGiB, gpu("gpu-g", 0, a100, 40)).obj()
	mib := makeNode(t, "gpu-m", "10.0.0.2").inventory(api.UnitMiB, gpu("gpu-m", 0, t4, 15360)).obj()
	cpu := makeNode(t, "cpu-1", "10.0.0.3").obj()
	nodes := []corev1.Node{*gib, *mib, *cpu}

	cases := []struct {
		name string
		pod  *corev1.Pod
		want []WarningCode // nil: counted, no warning
	}{
		{"a valid assignment is counted",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-g", api.PhaseAllocated, 0).Obj(), nil},
		{"a terminating pod still holds its units and is counted",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-g", api.PhaseAllocated, 0).Deleting().Obj(), nil},
		{"a pod whose node stopped reporting (phase Unknown) is counted",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-g", api.PhaseAllocated, 0).Phase(corev1.PodUnknown).Obj(), nil},
		{"a GiB assignment on a MiB node",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-m", api.PhaseAllocated, 0).Obj(),
			[]WarningCode{WarnUnitMismatch}},
		{"an assignment on a node that does not exist",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gone", api.PhaseAllocated, 0).Obj(),
			[]WarningCode{WarnNodeUnusable}},
		{"an assignment on a node without GPUs",
			runningPod("ns", "p").GPU("c", 4).AssignOn("cpu-1", api.PhaseAllocated, 0).Obj(),
			[]WarningCode{WarnNodeUnusable}},
		{"a record written for another node",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-m", api.PhaseAllocated, 0).Node("gpu-g").Obj(),
			[]WarningCode{WarnMalformedAssignment}},
		{"a finished pod is not counted and not a problem",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-g", api.PhaseAllocated, 0).Phase(corev1.PodSucceeded).Obj(), []WarningCode{}},
		{"a failed pod is not counted and not a problem",
			runningPod("ns", "p").GPU("c", 4).AssignOn("gpu-g", api.PhaseAllocated, 0).Phase(corev1.PodFailed).Obj(), []WarningCode{}},
		{"an unbound pod is not counted and not a problem",
			runningPod("ns", "p").GPU("c", 4).Phase(corev1.PodPending).Obj(), []WarningCode{}},
		{"a CPU pod on a GPU node is nothing",
			runningPod("ns", "p").Container("c").Node("gpu-g").Obj(), []WarningCode{}},
		{"a gpu-mem pod without a record on a CPU node is not ours",
			runningPod("ns", "p").GPU("c", 4).Node("cpu-1").Obj(), []WarningCode{}},
		{"an init container asking for gpu-mem without a record",
			runningPod("ns", "p").Container("c").Node("gpu-g").InitGPU("init", 4).Obj(),
			[]WarningCode{WarnNoAssignment}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: []corev1.Pod{*c.pod}})
			codes := []WarningCode{}
			for _, w := range v.Warnings {
				codes = append(codes, w.Code)
			}
			var allocated int64
			for _, n := range v.Nodes {
				allocated += n.Allocated
			}
			if c.want == nil {
				if len(codes) != 0 || allocated != 4 {
					t.Errorf("warnings %v, allocated %d; want none and 4", codes, allocated)
				}
				return
			}
			if allocated != 0 {
				t.Errorf("allocated %d, want 0", allocated)
			}
			if diff := cmp.Diff(c.want, codes); diff != "" {
				t.Errorf("warning codes (-want +got):\n%s", diff)
			}
			for _, n := range v.Nodes {
				if n.Name == c.pod.Spec.NodeName && len(n.Uncounted) != len(c.want) {
					t.Errorf("node %s lists %d uncounted pods, want %d", n.Name, len(n.Uncounted), len(c.want))
				}
			}
		})
	}
}

// TestAllocatableLeavesOutCardsHeldWhole: the device plugin reports the units
// of a card held whole unhealthy, so the kubelet's allocatable leaves them
// out; a card whose whole-card assignment is still pending may be counted or
// not. Anything else is a mismatch worth a warning.
func TestAllocatableLeavesOutCardsHeldWhole(t *testing.T) {
	cards := func() []api.Card {
		return []api.Card{gpu("gpu-w", 0, a100, 40), gpu("gpu-w", 1, a100, 40), gpu("gpu-w", 2, a100, 40)}
	}
	given := runningPod("ml", "given").Whole("main", 1).AssignWholeOn("gpu-w", api.PhaseAllocated, nil, []int{1}).Obj()
	pending := runningPod("ml", "pending").Whole("main", 1).AssignWholeOn("gpu-w", api.PhaseAssigned, nil, []int{2}).Phase(corev1.PodPending).Obj()
	cases := []struct {
		name        string
		allocatable int64
		pods        []*corev1.Pod
		mismatch    bool
	}{
		{"no card held whole, all units allocatable", 120, nil, false},
		{"no card held whole, units missing", 80, nil, true},
		{"a card given whole is left out", 80, []*corev1.Pod{given}, false},
		{"a card given whole still counted", 120, []*corev1.Pod{given}, true},
		{"a pending whole card not yet left out", 80, []*corev1.Pod{given, pending}, false},
		{"a pending whole card already left out", 40, []*corev1.Pod{given, pending}, false},
		{"more left out than the cards held whole", 0, []*corev1.Pod{given, pending}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := makeNode(t, "gpu-w", "10.0.7.1").inventory(api.UnitGiB, cards()...).capacity(120, tc.allocatable).obj()
			var pods []corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			v := Build(api.DefaultNames(), Cluster{Nodes: []corev1.Node{*node}, Pods: pods})
			var got []string
			for _, w := range v.Warnings {
				if w.Code == WarnAllocatableMismatch {
					got = append(got, w.Message)
				}
			}
			if (len(got) > 0) != tc.mismatch {
				t.Fatalf("allocatable %d: AllocatableMismatch warnings %q, want mismatch=%v", tc.allocatable, got, tc.mismatch)
			}
		})
	}
}

// TestOvercommitByTerminatingPods: the kubelet gives the units of a pod
// whose containers stopped to the next pod before the API server deletes
// the pod object, so for a moment a card's records hold both. When the pods
// being deleted account for the excess the warning says so
// (TerminatingOverlap); otherwise the card is Overcommitted.
func TestOvercommitByTerminatingPods(t *testing.T) {
	node := makeNode(t, "gpu-g", "10.0.0.1").inventory(api.UnitGiB, gpu("gpu-g", 0, a100, 24)).obj()
	running := func(name string, units int64) *podtest.Builder {
		return runningPod("ns", name).GPU("c", units).AssignOn("gpu-g", api.PhaseAllocated, 0)
	}
	cases := []struct {
		name string
		pods []*corev1.Pod
		want []WarningCode
		text string
	}{
		{"a pod being deleted and the pod that got its units",
			[]*corev1.Pod{running("old", 4).Deleting().Obj(), running("a", 20).Obj(), running("next", 3).Obj()},
			[]WarningCode{WarnTerminatingOverlap}, "node gpu-g: card 0 holds 27 GiB but has only 24, 4 of them of pods being deleted (ns/old)"},
		{"more over than the pods being deleted hold",
			[]*corev1.Pod{running("old", 2).Deleting().Obj(), running("a", 20).Obj(), running("next", 5).Obj()},
			[]WarningCode{WarnOvercommitted}, "node gpu-g: card 0 holds 27 GiB but has only 24"},
		{"over with nobody being deleted",
			[]*corev1.Pod{running("a", 20).Obj(), running("next", 5).Obj()},
			[]WarningCode{WarnOvercommitted}, "holds 25 GiB"},
		{"within the card, a pod being deleted is no problem",
			[]*corev1.Pod{running("old", 4).Deleting().Obj(), running("a", 20).Obj()}, []WarningCode{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var pods []corev1.Pod
			for _, p := range c.pods {
				pods = append(pods, *p)
			}
			v := Build(api.DefaultNames(), Cluster{Nodes: []corev1.Node{*node}, Pods: pods})
			codes := []WarningCode{}
			for _, w := range v.Warnings {
				codes = append(codes, w.Code)
				if !strings.Contains(w.Message, c.text) {
					t.Errorf("warning %q does not say %q", w.Message, c.text)
				}
			}
			if diff := cmp.Diff(c.want, codes); diff != "" {
				t.Errorf("warning codes (-want +got):\n%s", diff)
			}
			for _, p := range v.Nodes[0].Cards[0].Pods {
				if want := p.Name == "old"; p.Terminating != want {
					t.Errorf("pod %s: terminating %v, want %v", p.Name, p.Terminating, want)
				}
			}
		})
	}
}
