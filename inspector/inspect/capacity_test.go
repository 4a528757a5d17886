package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/api"
)

// free is the part of a Node that says what a new pod can get.
type free struct {
	Free, LargestFree, InServiceAllocated, InService int64
	FreeCards                                        int
}

func TestFreeMemory(t *testing.T) {
	cases := []struct {
		name string
		objs func(t *testing.T) []runtime.Object
		want free
	}{
		{"largest free share is the emptiest healthy card", func(t *testing.T) []runtime.Object {
			return []runtime.Object{
				makeNode(t, "n", "").inventory(api.UnitGiB, gpu("n", 0, a100, 40), gpu("n", 1, a100, 40)).obj(),
				runningPod("ml", "a").GPU("c", 38).AssignOn("n", api.PhaseAllocated, 0).Obj(),
				runningPod("ml", "b").GPU("c", 24).AssignOn("n", api.PhaseAssigned, 1).Obj(),
			}
		}, free{Free: 18, LargestFree: 16, InServiceAllocated: 62, InService: 80}},
		{"unhealthy and isolated cards offer nothing and leave the utilisation", func(t *testing.T) []runtime.Object {
			return []runtime.Object{
				makeNode(t, "n", "").annotate(api.DefaultNames().AnnotationIsolation(), "2").inventory(api.UnitGiB, gpu("n", 0, a100, 40),
					withState(gpu("n", 1, a100, 40), api.CardUnhealthy, "XID 48"), gpu("n", 2, a100, 40)).obj(),
				runningPod("ml", "a").GPU("c", 10).AssignOn("n", api.PhaseAllocated, 0).Obj(),
				runningPod("ml", "b").GPU("c", 30).AssignOn("n", api.PhaseAllocated, 1).Obj(),
			}
		}, free{Free: 30, LargestFree: 30, InServiceAllocated: 10, InService: 40}},
		{"an empty healthy card can be given whole; a card held whole is not free", func(t *testing.T) []runtime.Object {
			return []runtime.Object{
				makeNode(t, "n", "").inventory(api.UnitGiB, gpu("n", 0, a100, 40), gpu("n", 1, a100, 40)).obj(),
				runningPod("ml", "w").Whole("c", 1).AssignWholeOn("n", api.PhaseAllocated, nil, []int{0}).Obj(),
			}
		}, free{Free: 40, LargestFree: 40, FreeCards: 1, InServiceAllocated: 40, InService: 80}},
		{"a cordoned node offers nothing", func(t *testing.T) []runtime.Object {
			return []runtime.Object{makeNode(t, "n", "").cordoned().inventory(api.UnitGiB, gpu("n", 0, a100, 40)).obj()}
		}, free{InService: 40}},
		{"a node whose isolation annotation does not parse offers nothing", func(t *testing.T) []runtime.Object {
			return []runtime.Object{makeNode(t, "n", "").annotate(api.DefaultNames().AnnotationIsolation(), "card-0").inventory(api.UnitGiB, gpu("n", 0, a100, 40)).obj()}
		}, free{InService: 40}},
		{"an overcommitted card has nothing free, not less than nothing", func(t *testing.T) []runtime.Object {
			return []runtime.Object{
				makeNode(t, "n", "").inventory(api.UnitGiB, gpu("n", 0, t4, 15)).obj(),
				runningPod("ml", "a").GPU("c", 10).AssignOn("n", api.PhaseAllocated, 0).Obj(),
				runningPod("ml", "b").GPU("c", 10).AssignOn("n", api.PhaseAllocated, 0).Obj(),
			}
		}, free{InServiceAllocated: 20, InService: 15}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := split(tc.objs(t))
			v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods})
			if len(v.Nodes) != 1 {
				t.Fatalf("%d nodes, want 1", len(v.Nodes))
			}
			n := v.Nodes[0]
			got := free{n.Free, n.LargestFree, n.InServiceAllocated, n.InService, n.FreeCards}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			tot := v.Totals[0]
			if tot.Free != n.Free || tot.LargestFree != n.LargestFree || tot.FreeCards != n.FreeCards {
				t.Errorf("totals %+v disagree with the only node %+v", tot, got)
			}
		})
	}
}

// split separates the objects of a scenario into nodes and pods.
func split(objs []runtime.Object) ([]corev1.Node, []corev1.Pod) {
	var nodes []corev1.Node
	var pods []corev1.Pod
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Node:
			nodes = append(nodes, *x)
		case *corev1.Pod:
			pods = append(pods, *x)
		}
	}
	return nodes, pods
}
