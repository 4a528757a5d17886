package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// wholeOn returns the indexes of node's cards the snapshot shows held whole.
func wholeOn(t *testing.T, c *cache.Cache, node string) []int {
	t.Helper()
	snap, err := c.NodeSnapshot(node)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, card := range snap.Cards {
		if card.Whole {
			out = append(out, card.Index)
		}
	}
	return out
}

func TestInformerCountsWholeCardsUntilThePodFinishes(t *testing.T) {
	ctx := context.Background()
	pod := podtest.Make("ns", "p").GPU("infer", 10).Whole("train", 2).AssignWholeOn("n1", api.PhaseAllocated, []int{0}, []int{1, 3}).Obj()
	client := fake.NewClientset(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Card(2, 40).Card(3, 40).Obj(), pod)
	c := startInformers(t, client)
	if diff := cmp.Diff([]int{1, 3}, wholeOn(t, c, "n1")); diff != "" {
		t.Fatalf("cards held whole (-want +got):\n%s", diff)
	}
	info := c.Inspect("n1")[0]
	want := []api.ExtenderPod{{Namespace: "ns", Name: "p", UID: pod.UID, Container: "train", Units: 40, Whole: true, State: cache.Confirmed, Phase: api.PhaseAllocated}}
	if diff := cmp.Diff(want, info.Cards[3].Pods); diff != "" {
		t.Errorf("card 3 pods (-want +got):\n%s", diff)
	}
	if !info.Cards[3].Whole || info.Cards[3].Used != 40 || info.Cards[2].Whole || info.Cards[0].Used != 10 {
		t.Errorf("inspect cards: %+v", info.Cards)
	}
	done := pod.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "whole cards released", func() bool { return len(wholeOn(t, c, "n1")) == 0 })
}

func TestAssumeKeepsWholeCardsExclusive(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Card(1, 40).Obj())
	c.SetPod(podtest.Make("ns", "share").GPU("main", 5).AssignOn("n1", api.PhaseAllocated, 0).Obj())
	c.SetPod(podtest.Make("ns", "whole").Whole("main", 1).AssignWholeOn("n1", api.PhaseAllocated, nil, []int{1}).Obj())
	snap, _ := c.NodeSnapshot("n1")

	wholePod := podtest.Make("ns", "w").Whole("main", 1).Obj()
	onShared := podtest.Make("ns", "w").Whole("main", 1).AssignWholeOn("n1", api.PhaseAssigned, nil, []int{0}).Obj()
	onWhole := podtest.Make("ns", "w").Whole("main", 1).AssignWholeOn("n1", api.PhaseAssigned, nil, []int{1}).Obj()
	for name, pod := range map[string]*corev1.Pod{"a card with shared memory given whole": onShared, "a card held whole given whole again": onWhole} {
		a, err := api.DefaultNames().AssignmentFromPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Assume(wholePod, podtest.Request(wholePod), a, snap); !errors.Is(err, cache.ErrOverCapacity) {
			t.Errorf("%s: err = %v, want ErrOverCapacity", name, err)
		}
	}
	sharePod := podtest.Make("ns", "s").GPU("main", 1).Obj()
	if err := c.Assume(sharePod, podtest.Request(sharePod), podtest.AssignmentFor(sharePod, "n1", api.PhaseAssigned, 1), snap); !errors.Is(err, cache.ErrOverCapacity) {
		t.Errorf("a share on a card held whole: err = %v, want ErrOverCapacity", err)
	}
}

func TestWorkloadLearnsWholeCardShapes(t *testing.T) {
	c := cache.New()
	c.SetPod(podtest.Make("ns", "p1").GPU("a", 10).Whole("b", 2).Host("4", "8Gi").Obj())
	c.SetPod(podtest.Make("ns", "p2").Whole("a", 2).Host("2", "4Gi").Obj())
	want := []allocator.Shape{
		{Units: 10, Host: allocator.HostResources{CPUMilli: 2000, MemoryMiB: 4096}, Weight: 1},
		{WholeCards: 2, Host: allocator.HostResources{CPUMilli: 2000, MemoryMiB: 4096}, Weight: 2},
	}
	if diff := cmp.Diff(want, c.Workload().Shapes); diff != "" {
		t.Errorf("workload shapes (-want +got):\n%s", diff)
	}
}
