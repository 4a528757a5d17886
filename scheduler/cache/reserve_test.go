package cache_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// A reservation (the filter's assumption) counts like any assumption until
// bind claims it, the pod is filtered again, or its TTL passes; a claimed one
// is a bind in flight, which never expires.
func TestReservationCountsUntilClaimedUnreservedOrExpired(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := cache.New(cache.WithClock(clk))
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	c.SetNode(fixture.MakeNode("n2").Card(0, 40).Obj())
	claimed := podtest.Make("ns", "claimed").GPU("main", 10).Obj()
	dropped := podtest.Make("ns", "dropped").GPU("main", 10).Obj()
	expired := podtest.Make("ns", "expired").GPU("main", 10).Obj()
	for _, pod := range []*corev1.Pod{claimed, dropped, expired} {
		if _, err := decideAndAssume(t, c, pod, "n1"); err != nil {
			t.Fatal(err)
		}
		if !c.Reserve(pod.UID, time.Minute) {
			t.Fatalf("Reserve(%s) after Assume: false", pod.Name)
		}
	}
	if c.Reserve(claimed.UID, time.Minute) {
		t.Error("a reservation was reserved again")
	}
	if diff := cmp.Diff(map[int]int64{0: 30}, used(c, "n1")); diff != "" {
		t.Errorf("reservations count (-want +got):\n%s", diff)
	}

	if _, ok := c.Claim(claimed.UID, "n2"); ok {
		t.Error("claimed a reservation on another node")
	}
	if diff := cmp.Diff(map[int]int64{0: 20}, used(c, "n1")); diff != "" {
		t.Errorf("a reservation claimed on another node must be dropped (-want +got):\n%s", diff)
	}
	if _, err := decideAndAssume(t, c, claimed, "n1"); err != nil {
		t.Fatal(err)
	}
	c.Reserve(claimed.UID, time.Minute)
	a, ok := c.Claim(claimed.UID, "n1")
	if !ok || a.Node != "n1" || a.PodUID != claimed.UID || a.Containers[0].Units != 10 {
		t.Fatalf("Claim = %+v, %v; want the reserved assignment", a, ok)
	}
	if _, ok := c.Claim(claimed.UID, "n1"); ok {
		t.Error("a reservation was claimed twice")
	}
	if c.Unreserve(claimed.UID) {
		t.Error("Unreserve dropped a claimed reservation, a bind in flight")
	}
	if !c.Unreserve(dropped.UID) || c.Unreserve(dropped.UID) {
		t.Error("Unreserve of a reservation: want true once")
	}

	clk.Step(59 * time.Second)
	if n := c.CleanupExpired(); n != 0 {
		t.Fatalf("dropped %d before the reservation's TTL", n)
	}
	clk.Step(2 * time.Second)
	if n := c.CleanupExpired(); n != 1 {
		t.Fatalf("dropped %d after the reservation's TTL, want 1", n)
	}
	if _, ok := c.PodState(expired.UID); ok {
		t.Error("an unclaimed reservation outlived its TTL")
	}
	if st, _ := c.PodState(claimed.UID); st != cache.Assumed {
		t.Errorf("claimed reservation: state %q, want assumed (bind in flight, never expires)", st)
	}
	if diff := cmp.Diff(map[int]int64{0: 10}, used(c, "n1")); diff != "" {
		t.Errorf("after claim, unreserve and expiry (-want +got):\n%s", diff)
	}
}

// What changed on the node between the filter and the bind is checked as
// Assume checks it: a card isolated, the node's plugin not serving, a card filled by a
// pod another scheduler placed. Claim drops such a reservation (bind decides
// again) and hands out an unchanged one.
func TestClaimDropsAReservationNoLongerValid(t *testing.T) {
	iso := api.DefaultNames().AnnotationIsolation()
	for _, tc := range []struct {
		name   string
		change func(c *cache.Cache, card int)
		ok     bool
	}{
		{"unchanged", func(*cache.Cache, int) {}, true},
		{"card isolated", func(c *cache.Cache, card int) {
			c.SetNode(fixture.MakeNode("n1").Card(0, 16).Card(1, 16).Annotation(iso, fmt.Sprint(card)).Obj())
		}, false},
		{"node's device plugin not serving", func(c *cache.Cache, _ int) { c.SetPod(pluginPod("plugin-a", "n1", false).Obj()) }, false},
		{"card filled by a pod placed elsewhere", func(c *cache.Cache, card int) {
			c.SetPod(podtest.Make("ns", "other").GPU("main", 10).AssignOn("n1", api.PhaseAllocated, card).Obj())
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cache.New(cache.WithDevicePluginSelector(labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "device-plugin"})))
			c.SetNode(fixture.MakeNode("n1").Card(0, 16).Card(1, 16).Obj())
			pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
			a, err := decideAndAssume(t, c, pod, "n1")
			if err != nil {
				t.Fatal(err)
			}
			c.Reserve(pod.UID, time.Minute)
			tc.change(c, a.Containers[0].CardIndex)
			if got, ok := c.Claim(pod.UID, "n1"); ok != tc.ok {
				t.Fatalf("Claim = %+v, %v; want %v", got, ok, tc.ok)
			}
			if _, kept := c.PodState(pod.UID); kept != tc.ok {
				t.Errorf("after Claim the pod is cached: %v, want %v", kept, tc.ok)
			}
		})
	}
}
