package cache_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// promiseOn is an assignment of units on card 1 of n1 for pod.
func promiseOn(pod string, units int64) api.Assignment {
	return api.Assignment{Version: api.AssignmentVersion, PodUID: types.UID("uid-ns-" + pod), Node: "n1", Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "main", CardUUID: podtest.CardUUID("n1", 1), CardIndex: 1, Units: units}}}
}

func TestAnOfferBecomesAPromiseForTheNominatedNodeOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := cache.New(cache.WithClock(clk), cache.WithAssumeTTL(time.Minute))
	c.SetNode(fixture.MakeNode("n1").Cards(2, 40).Obj())
	c.SetNode(fixture.MakeNode("n2").Cards(2, 40).Obj())
	big := podtest.Make("ns", "big").GPU("main", 40).Obj()

	c.Offer(big, map[string]api.Assignment{"n1": promiseOn("big", 40)})
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("an offer kube-scheduler has not taken counts (-want +got):\n%s", diff)
	}
	// kube-scheduler nominates another node: the offer for n1 is not taken.
	other := big.DeepCopy()
	other.Status.NominatedNodeName = "n2"
	c.SetPod(other)
	if _, _, _, ok := c.NominatedView(big.UID); ok {
		t.Fatal("a promise on a node the offer did not name")
	}
	// It nominates n1: the freed card counts for everyone but the pod.
	c.Offer(big, map[string]api.Assignment{"n1": promiseOn("big", 40)})
	nominated := big.DeepCopy()
	nominated.Status.NominatedNodeName = "n1"
	c.SetPod(nominated)
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 40}, used(c, "n1")); diff != "" {
		t.Errorf("the promise (-want +got):\n%s", diff)
	}
	node, view, _, ok := c.NominatedView(big.UID)
	if !ok || node != "n1" || view.Cards[1].Used != 0 {
		t.Fatalf("the pod's own view: %v %v %+v", ok, node, view)
	}
	if st, _ := c.PodState(big.UID); st != cache.Nominated {
		t.Errorf("state %q, want %q", st, cache.Nominated)
	}
	// A status update that keeps the nomination keeps the promise.
	c.SetPod(nominated)
	if _, _, _, ok := c.NominatedView(big.UID); !ok {
		t.Error("the promise ended on an unrelated update")
	}
	// It ends after the TTL.
	clk.Step(2 * time.Minute)
	if n := c.CleanupExpired(); n != 1 {
		t.Errorf("CleanupExpired dropped %d, want the promise", n)
	}
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after expiry (-want +got):\n%s", diff)
	}
}

func TestAPromiseEndsWithItsPod(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Cards(2, 40).Obj())
	big := podtest.Make("ns", "big").GPU("main", 40).Obj()
	big.Status.NominatedNodeName = "n1"
	c.Offer(big, map[string]api.Assignment{"n1": promiseOn("big", 40)})
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 40}, used(c, "n1")); diff != "" {
		t.Fatalf("the promise (-want +got):\n%s", diff)
	}
	moved := big.DeepCopy()
	moved.Status.NominatedNodeName = "n2"
	c.SetPod(moved)
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after the pod names another node (-want +got):\n%s", diff)
	}
	c.Offer(big, map[string]api.Assignment{"n1": promiseOn("big", 40)})
	c.DeletePod(big.UID)
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "n1")); diff != "" {
		t.Errorf("after the pod is deleted (-want +got):\n%s", diff)
	}
}
