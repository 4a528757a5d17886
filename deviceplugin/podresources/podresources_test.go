package podresources

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/podrestest"
	"github.com/gpushare/gpushare/internal/podtest"
)

const nodeName = "gpu-node"

// The kubelet refuses PodResources calls beyond its rate limit (100/s,
// bursts of 10): reading 40 pods one Get each stays within it, and a Get
// it refuses is asked again, so the account is read whole.
func TestKubeletAccountIsReadWithinTheKubeletsRateLimit(t *testing.T) {
	srv := podrestest.Start(t, string(api.DefaultNames().ResourceName()))
	srv.LimitRate(100, 10)
	var pods []*corev1.Pod
	for i := range 40 {
		name := fmt.Sprintf("p%d", i)
		pods = append(pods, podtest.Bound("n", name, i).GPU("c", 1).Obj())
		srv.Hold("ns", name, "c", api.UnitID(podtest.CardUUID("n", 0), int64(i)))
	}
	k := &Kubelet{Socket: srv.Socket, Resource: string(api.DefaultNames().ResourceName())}
	for round := range 3 {
		hs, err := k.Get(context.Background(), pods)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(hs) != 40 {
			t.Fatalf("round %d: %d holdings, want 40", round, len(hs))
		}
	}
}

// The pod an admission read finds the kubelet admitting, once its Allocate
// answered for its only container of the resource, is remembered holding
// those devices, as the kubelet records them: the container's
// PreStartContainer and the next admissions ask no Get about it. A pod with
// two such containers, or another pod than the one the read found, is asked
// again: the kubelet may still be allocating it, or never was.
func TestTheAdmittedPodIsRememberedFromItsAllocate(t *testing.T) {
	ctx := context.Background()
	res := string(api.DefaultNames().ResourceName())
	card := podtest.CardUUID(nodeName, 0)
	single := podtest.Bound(nodeName, "x", 0).GPU("main", 2).Obj()
	double := podtest.Bound(nodeName, "y", 1).GPU("a", 2).GPU("b", 2).Obj()
	other := podtest.Bound(nodeName, "z", 2).GPU("main", 2).Obj()
	for _, tc := range []struct {
		name         string
		admit, alloc *corev1.Pod
		container    string
		remembered   bool
	}{
		{name: "the admitted pod's only container", admit: single, alloc: single, container: "main", remembered: true},
		{name: "one of two containers", admit: double, alloc: double, container: "a"},
		{name: "not the pod the read found", admit: single, alloc: other, container: "main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := podrestest.Start(t, res)
			srv.Know(tc.admit.Namespace, tc.admit.Name)
			k := NewKubelet(srv.Socket, res, nil, nil)
			pods := []*corev1.Pod{tc.admit}
			if tc.alloc != tc.admit {
				pods = append(pods, tc.alloc)
			}
			hs, err := k.Get(WithAdmission(ctx), pods)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != 1 || !hs[0].Known() || hs[0].Pod != tc.admit.Name {
				t.Fatalf("admission read: %+v; want pod %s known, holding nothing", hs, tc.admit.Name)
			}
			ids := []string{api.UnitID(card, 0), api.UnitID(card, 1)}
			k.KubeletChanged()
			k.Allocated(tc.alloc, tc.container, ids)
			srv.Hold(tc.alloc.Namespace, tc.alloc.Name, tc.container, ids...)
			if tc.alloc != tc.admit {
				// The pod the read found got other units meanwhile.
				srv.Hold(tc.admit.Namespace, tc.admit.Name, "main", api.UnitID(card, 2), api.UnitID(card, 3))
			}
			_, before := srv.Calls()
			hs, err = k.Get(WithStarting(ctx, ids), pods)
			if err != nil {
				t.Fatal(err)
			}
			_, after := srv.Calls()
			if got := after - before; (got == 0) != tc.remembered {
				t.Errorf("PreStartContainer's read made %d Gets; remembered from the Allocate: %v, want %v", got, got == 0, tc.remembered)
			}
			found := false
			for _, h := range hs {
				found = found || (h.Pod == tc.alloc.Name && h.Container == tc.container && slices.Equal(h.IDs, ids))
			}
			if !found {
				t.Errorf("PreStartContainer's read: %+v; want %s/%s holding %v", hs, tc.alloc.Name, tc.container, ids)
			}
		})
	}
}

// Recheck forgets what was remembered of the pods not admitted yet, and only
// those, once a pod: the next read asks the kubelet about them again, not
// about the running ones.
func TestRecheckForgetsOnlyThePodsNotAdmittedYet(t *testing.T) {
	ctx := context.Background()
	res := string(api.DefaultNames().ResourceName())
	card := podtest.CardUUID(nodeName, 0)
	running := podtest.Bound(nodeName, "running", 0).GPU("main", 1).Phase(corev1.PodRunning).Obj()
	pending := podtest.Bound(nodeName, "pending", 1).GPU("main", 1).Obj()
	srv := podrestest.Start(t, res)
	srv.Hold("ns", "running", "main", api.UnitID(card, 0))
	srv.Hold("ns", "pending", "main", api.UnitID(card, 1))
	k := &Kubelet{Socket: srv.Socket, Resource: res}
	pods := []*corev1.Pod{running, pending}
	if _, err := k.Get(ctx, pods); err != nil {
		t.Fatal(err)
	}
	_, before := srv.Calls()
	if got := k.Recheck(pods); !slices.Equal(got, []types.UID{pending.UID}) {
		t.Errorf("Recheck forgot %v; want only the pod not admitted yet, %s", got, pending.UID)
	}
	hs, err := k.Get(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	if _, after := srv.Calls(); after-before != 1 || len(hs) != 2 {
		t.Errorf("after Recheck, a read asked %d Gets for %d holdings; want 1 (the pending pod) for 2", after-before, len(hs))
	}
	if got := k.Recheck(pods); len(got) != 0 {
		t.Errorf("a second Recheck forgot %v; each pod is rechecked once", got)
	}
}
