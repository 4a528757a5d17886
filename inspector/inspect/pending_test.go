package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// waitingScenario: two GPU nodes that take pods and a cordoned one, and GPU
// pods waiting for each reason there is.
func waitingScenario(t *testing.T) []runtime.Object {
	return []runtime.Object{
		makeNode(t, "gpu-a", "10.0.8.1").label("pool", "train").inventory(api.UnitGiB, gpu("gpu-a", 0, a100, 40), gpu("gpu-a", 1, a100, 40)).obj(),
		makeNode(t, "gpu-b", "10.0.8.2").inventory(api.UnitGiB, gpu("gpu-b", 0, t4, 15)).obj(),
		makeNode(t, "gpu-c", "10.0.8.3").cordoned().inventory(api.UnitGiB, gpu("gpu-c", 0, h100, 80), gpu("gpu-c", 1, h100, 80)).obj(),
		runningPod("ml", "train-0").GPU("c", 30).AssignOn("gpu-a", api.PhaseAllocated, 0).Obj(),
		runningPod("ml", "train-1").GPU("c", 8).AssignOn("gpu-a", api.PhaseAllocated, 0).Obj(),
		runningPod("ml", "serve").GPU("c", 24).AssignOn("gpu-a", api.PhaseAllocated, 1).Obj(),
		runningPod("default", "notebook").GPU("c", 7).AssignOn("gpu-b", api.PhaseAllocated, 0).Obj(),

		runningPod("ml", "fits-now").GPU("c", 10).Label("team", "a").Unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.").Obj(),
		runningPod("ml", "needs-room").GPU("c", 20).Label("team", "a").Unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no card of gpu-a, gpu-b has 20 GiB free.").Obj(),
		runningPod("ml", "too-big").GPU("c", 200).Unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no card of gpu-a, gpu-b has 200 GiB.").Obj(),
		runningPod("ml", "two-whole").Whole("c", 2).Unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 not enough unused cards.").Obj(),
		runningPod("ml", "h100-only").GPU("c", 10).Annotation(api.DefaultNames().AnnotationCardModels(), "H100").Unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no H100 card.").Obj(),
		runningPod("research", "new").Whole("c", 1).Phase(corev1.PodPending).Obj(),
		// Not GPU pods waiting: a CPU pod, a finished one, a bound one.
		runningPod("ml", "cpu-only").Container("c").Unschedulable("0/3 nodes are available: 3 Insufficient cpu.").Obj(),
		runningPod("ml", "failed").GPU("c", 10).Phase(corev1.PodFailed).Obj(),
		runningPod("ml", "starting").GPU("c", 1).AssignOn("gpu-b", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
	}
}

func TestSuggest(t *testing.T) {
	nodes, pods := split(waitingScenario(t))
	v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods})
	snap := snapshot(v)
	share := func(units ...int64) allocator.Request {
		r := api.PodRequest{}
		for _, u := range units {
			r.Containers = append(r.Containers, api.ContainerRequest{Name: "c", Units: u})
		}
		return allocator.NewRequest(r)
	}
	whole := func(n int) allocator.Request {
		return allocator.NewRequest(api.PodRequest{WholeCards: []api.WholeCardRequest{{Name: "c", Cards: n}}})
	}
	cases := []struct {
		name string
		req  allocator.Request
		want Change
	}{
		{"fits now on the card with room", share(10), Change{Kind: ChangeNone, Node: "gpu-a", Cards: []int{1}, Unit: api.UnitGiB}},
		{"the card closest to the request needs the least freed", share(20), Change{Kind: ChangeFree, Node: "gpu-a", Cards: []int{1}, Units: 4, Unit: api.UnitGiB, Holders: []string{"ml/serve"}}},
		{"cards too small for the request are not candidates", share(17), Change{Kind: ChangeFree, Node: "gpu-a", Cards: []int{1}, Units: 1, Unit: api.UnitGiB, Holders: []string{"ml/serve"}}},
		{"larger than any card of a node that takes pods", share(60), Change{Kind: ChangeNoCard}},
		{"whole cards: empty the least loaded", whole(1), Change{Kind: ChangeFree, Node: "gpu-b", Cards: []int{0}, Units: 8, Unit: api.UnitGiB, Holders: []string{"default/notebook", "ml/starting"}}},
		{"whole cards: both cards of the only node that has two", whole(2), Change{Kind: ChangeFree, Node: "gpu-a", Cards: []int{0, 1}, Units: 62, Unit: api.UnitGiB, Holders: []string{"ml/serve", "ml/train-0", "ml/train-1"}}},
		{"more whole cards than any node has", whole(3), Change{Kind: ChangeNoCard}},
		{"two containers that fit only once both cards have room", share(20, 20), Change{Kind: ChangeFree, Node: "gpu-a", Cards: []int{1}, Units: 24, Unit: api.UnitGiB, Holders: []string{"ml/serve"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Suggest(snap, v, tc.req)
			got.Message = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPendingListsOnlyWaitingGPUPods(t *testing.T) {
	nodes, pods := split(waitingScenario(t))
	pv := BuildPending(api.DefaultNames(), Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods}), pods)
	var got []string
	for _, p := range pv.Pods {
		got = append(got, p.Namespace+"/"+p.Name+" "+string(p.Change.Kind))
	}
	want := []string{"ml/fits-now FitsNow", "ml/h100-only NoCardOfThatSize", "ml/needs-room Free", "ml/too-big NoCardOfThatSize", "ml/two-whole Free", "research/new Free"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A node served through DRA takes claims, not example.com/gpu-mem pods: its
// free memory is no place for a waiting pod of the device plugin.
func TestPendingPodsAreNotSentToDRANodes(t *testing.T) {
	nodes, pods := split(append(waitingScenario(t), makeNode(t, "dra-h", "10.0.8.9").label(api.DefaultNames().LabelDRA(), "true").obj()))
	v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods, DRA: DRA{Slices: []resourceapi.ResourceSlice{*dratest.Slice("dra-h", api.UnitGiB, gpu("dra-h", 0, h100, 80)).Obj()}}})
	got := Suggest(snapshot(v), v, allocator.NewRequest(api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Units: 60}}}))
	if got.Kind != ChangeNoCard {
		t.Errorf("a 60 GiB pod: %s on %s, want %s: only the DRA node has such a card", got.Kind, got.Node, ChangeNoCard)
	}
}
