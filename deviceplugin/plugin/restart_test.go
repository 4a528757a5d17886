package plugin

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// A guess an earlier plugin process recorded at Allocate (the ledger is in
// memory, so a new process does not know it was a guess) is reverted once
// the kubelet's account shows the pod holding nothing: its record drops back
// to Assigned, so that the card's Allocated records never count the units
// twice — the chaos run's `records hold 30 of 24 units` (seed 16, two
// pending 7 GiB pods both Allocated on one card after a device plugin
// restart). Pods the account shows holding their units, and pods already
// admitted, keep their records.
func TestReconcileRevertsAGuessOfAnEarlierPluginProcess(t *testing.T) {
	t.Run("units: the kubelet gave the guessed units to another pod", func(t *testing.T) {
		h := newHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				// The earlier process guessed "guessed" for the kubelet's
				// Allocate of units 0-5 of card 0 and recorded it; the
				// kubelet meant "holder", whose record is still the plan.
				podtest.Bound(nodeName, "guessed", 1).GPU("c", 6).Assign(api.PhaseAllocated, c[0]).Obj(),
				podtest.Bound(nodeName, "holder", 2).GPU("c", 6).Assign(api.PhaseAssigned, c[0]).Obj(),
			}
		}})
		h.podres.set(podresources.Holding{Namespace: "ns", Pod: "holder", Container: "c", IDs: unitIDs(h.cards[0].UUID, 0, 6)})
		if err := h.plugin.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Assigned", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "guessed"))); diff != "" {
			t.Errorf("guessed (-want +got):\n%s", diff)
		}
		// Holder's plan names the card its units are of: left Assigned.
		if diff := cmp.Diff([]string{"Assigned", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "holder"))); diff != "" {
			t.Errorf("holder (-want +got):\n%s", diff)
		}
		// The reverted pod is pending again: the kubelet's next Allocate of
		// 6 units (card 1, the only room left) is for it.
		h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 6))
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "guessed"))); diff != "" {
			t.Errorf("guessed after its own Allocate (-want +got):\n%s", diff)
		}
	})

	t.Run("units: the kubelet holds nothing for the pod", func(t *testing.T) {
		h := newHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "guessed", 1).GPU("a", 2).GPU("b", 2).Assign(api.PhaseAllocated, c[0], c[1]).Obj(),
			}
		}})
		// Container a's units are the kubelet's; b's guess is not.
		h.podres.set(podresources.Holding{Namespace: "ns", Pod: "guessed", Container: "a", IDs: unitIDs(h.cards[0].UUID, 0, 2)})
		if err := h.plugin.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Assigned", "a=" + h.cards[0].UUID, "b=" + h.cards[1].UUID}, cardsOf(h.record(t, "guessed"))); diff != "" {
			t.Errorf("guessed (-want +got):\n%s", diff)
		}
	})

	t.Run("units: held, admitted, or no account: the record stays", func(t *testing.T) {
		for _, withAccount := range []bool{true, false} {
			h := newHarness(t, setup{podres: withAccount, pods: func(c [2]podtest.Card) []*corev1.Pod {
				return []*corev1.Pod{
					podtest.Bound(nodeName, "held", 1).GPU("c", 2).Assign(api.PhaseAllocated, c[0]).Obj(),
					// Admitted, and not in the account: only its own
					// account could change its record.
					podtest.Bound(nodeName, "running", 2).GPU("c", 2).Assign(api.PhaseAllocated, c[1]).Phase(corev1.PodRunning).Obj(),
					// Without the account there is no truth to revert to.
					podtest.Bound(nodeName, "unknown", 3).GPU("c", 2).Assign(api.PhaseAllocated, c[1]).Obj(),
				}
			}})
			wantUnknown := "Allocated"
			if withAccount {
				h.podres.set(podresources.Holding{Namespace: "ns", Pod: "held", Container: "c", IDs: unitIDs(h.cards[0].UUID, 0, 2)})
				wantUnknown = "Assigned"
			}
			if err := h.plugin.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			for pod, want := range map[string]string{"held": "Allocated", "running": "Allocated", "unknown": wantUnknown} {
				if got := cardsOf(h.record(t, pod))[0]; got != want {
					t.Errorf("account %v: %s's record is %s, want %s", withAccount, pod, got, want)
				}
			}
		}
	})

	t.Run("whole cards: the kubelet's account shows the pod holding none", func(t *testing.T) {
		h, _ := wholeHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "guessed", 0).Whole("train", 1).AssignWhole(api.PhaseAllocated, nil, []podtest.Card{c[0]}).Obj(),
				podtest.Bound(nodeName, "holder", 1).Whole("train", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0]}).Obj(),
			}
		}})
		h.plugin.cfg.WholePodResources.(*fakePodResources).set(podresources.Holding{Namespace: "ns", Pod: "holder", Container: "train", IDs: []string{h.cards[0].UUID}})
		if err := h.plugin.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		for pod, want := range map[string]api.AssignmentPhase{"guessed": api.PhaseAssigned, "holder": api.PhaseAllocated} {
			if got := h.record(t, pod).Phase; got != want {
				t.Errorf("%s's record is %s, want %s", pod, got, want)
			}
		}
	})
}
