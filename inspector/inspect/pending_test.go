package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// unschedulable marks the pod unbound and waiting, with the scheduler's
// PodScheduled=False condition carrying message.
func (b *podBuilder) unschedulable(message string) *podBuilder {
	b.p.Status.Phase = corev1.PodPending
	b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message})
	return b
}

// waitingScenario: two GPU nodes that take pods and a cordoned one, and GPU
// pods waiting for each reason there is.
func waitingScenario(t *testing.T) []runtime.Object {
	return []runtime.Object{
		makeNode(t, "gpu-a", "10.0.8.1").label("pool", "train").inventory(api.UnitGiB, gpu("gpu-a", 0, a100, 40), gpu("gpu-a", 1, a100, 40)).obj(),
		makeNode(t, "gpu-b", "10.0.8.2").inventory(api.UnitGiB, gpu("gpu-b", 0, t4, 15)).obj(),
		makeNode(t, "gpu-c", "10.0.8.3").cordoned().inventory(api.UnitGiB, gpu("gpu-c", 0, h100, 80), gpu("gpu-c", 1, h100, 80)).obj(),
		makePod(t, "ml", "train-0").container("c", 30).node("gpu-a").assign(api.PhaseAllocated, on{"c", 0, 30}).obj(),
		makePod(t, "ml", "train-1").container("c", 8).node("gpu-a").assign(api.PhaseAllocated, on{"c", 0, 8}).obj(),
		makePod(t, "ml", "serve").container("c", 24).node("gpu-a").assign(api.PhaseAllocated, on{"c", 1, 24}).obj(),
		makePod(t, "default", "notebook").container("c", 7).node("gpu-b").assign(api.PhaseAllocated, on{"c", 0, 7}).obj(),

		makePod(t, "ml", "fits-now").container("c", 10).label("team", "a").unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.").obj(),
		makePod(t, "ml", "needs-room").container("c", 20).label("team", "a").unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no card of gpu-a, gpu-b has 20 GiB free.").obj(),
		makePod(t, "ml", "too-big").container("c", 200).unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no card of gpu-a, gpu-b has 200 GiB.").obj(),
		makePod(t, "ml", "two-whole").wholeContainer("c", 2).unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 not enough unused cards.").obj(),
		makePod(t, "ml", "h100-only").container("c", 10).annotate(api.DefaultNames().AnnotationCardModels(), "H100").unschedulable("0/3 nodes are available: 1 node(s) were unschedulable, 2 no H100 card.").obj(),
		makePod(t, "research", "new").wholeContainer("c", 1).phase(corev1.PodPending).obj(),
		// Not GPU pods waiting: a CPU pod, a finished one, a bound one.
		makePod(t, "ml", "cpu-only").container("c", 0).unschedulable("0/3 nodes are available: 3 Insufficient cpu.").obj(),
		makePod(t, "ml", "failed").container("c", 10).phase(corev1.PodFailed).obj(),
		makePod(t, "ml", "starting").container("c", 1).node("gpu-b").assign(api.PhaseAssigned, on{"c", 0, 1}).phase(corev1.PodPending).obj(),
	}
}

func (b *podBuilder) label(key, value string) *podBuilder {
	if b.p.Labels == nil {
		b.p.Labels = map[string]string{}
	}
	b.p.Labels[key] = value
	return b
}

func TestSuggest(t *testing.T) {
	nodes, pods := split(waitingScenario(t))
	v := Build(api.DefaultNames(), nodes, pods)
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
	pv := BuildPending(api.DefaultNames(), Build(api.DefaultNames(), nodes, pods), pods)
	var got []string
	for _, p := range pv.Pods {
		got = append(got, p.Namespace+"/"+p.Name+" "+string(p.Change.Kind))
	}
	want := []string{"ml/fits-now FitsNow", "ml/h100-only NoCardOfThatSize", "ml/needs-room Free", "ml/too-big NoCardOfThatSize", "ml/two-whole Free", "research/new Free"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
