package plugin

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/podrestest"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// kubeletPlugin is a plugin over two simulated 8 GiB cards reading the
// kubelet's account through podresources.Kubelet from a fake PodResources
// server, with pod a Running on card 0 (units 0–3) and pod b, assigned
// to card 0 too, awaiting admission.
func kubeletPlugin(t *testing.T) (*Plugin, *podrestest.Server, *memCluster, podtest.Card) {
	t.Helper()
	sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
	store := sn.Store
	card0 := sn.Cards[0]
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	mem.pods = append(mem.pods,
		podtest.Bound(nodeName, "a", 0).GPU("main", 4).Assign(api.PhaseAllocated, card0).Phase(corev1.PodRunning).Obj(),
		podtest.Bound(nodeName, "b", 1).GPU("main", 4).Assign(api.PhaseAssigned, card0).Obj(),
	)
	srv := podrestest.Start(t, string(api.DefaultNames().ResourceName()))
	srv.Hold("ns", "a", "main", unitIDs(card0.UUID, 0, 4)...)
	podres := &podresources.Kubelet{Socket: srv.Socket, Resource: string(api.DefaultNames().ResourceName())}
	p := New(Config{PluginDir: t.TempDir()}, store, mem, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	return p, srv, mem, card0
}

// In kubelet v1.34 PodResources List calls the device manager's
// UpdateAllocatedDevices, which rebuilds the allocated set from committed
// allocations and so drops the reservation of an Allocate in flight: the
// next admission can be handed the same units
// (kubernetes/kubernetes#137534). GetPreferredAllocation, Allocate and
// PreStartContainer run inside that window, and reconciliation (triggered
// by every Allocate) may run while the next one is in flight: the plugin
// reads the kubelet's account with Get, pod by pod, and never with List.
func TestKubeletAccountIsReadWithGetNeverList(t *testing.T) {
	ctx := context.Background()
	p, srv, mem, card0 := kubeletPlugin(t)
	ids := unitIDs(card0.UUID, 4, 4)
	if _, err := p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: unitIDs(card0.UUID, 4, 4), AllocationSize: 4,
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
		t.Fatal(err)
	}
	srv.Hold("ns", "b", "main", ids...)
	if _, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	list, get := srv.Calls()
	if list != 0 {
		t.Errorf("the plugin called PodResources List %d times; want never (it drops the kubelet's reservation of an allocation in flight)", list)
	}
	if get == 0 {
		t.Errorf("the plugin never read the kubelet's account (no PodResources Get)")
	}
	if a := mem.record(t, "b"); a.Phase != api.PhaseAssigned || a.Containers[0].CardUUID != card0.UUID {
		t.Errorf("pod b's record: %s on %s; want Assigned on card 0 (its card is right: with the kubelet's account nothing is written)", a.Phase, a.Containers[0].CardUUID)
	}
}

// When the kubelet hands a container units its own account shows held by a
// container of another live pod (the double allocation of
// kubernetes/kubernetes#137534), Allocate is refused: the pod is rejected at
// admission, as the kubelet rejects it when a plugin refuses, rather than
// run two containers on the same memory. No record names the pending pod
// on those units.
func TestAllocateRefusesUnitsTheKubeletShowsHeldByAnotherPod(t *testing.T) {
	ctx := context.Background()
	p, _, mem, card0 := kubeletPlugin(t)
	held := unitIDs(card0.UUID, 0, 4) // pod a's
	_, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: held}}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Allocate of units pod a holds: %v; want FailedPrecondition", err)
	}
	if a := mem.record(t, "b"); a.Phase != api.PhaseAssigned {
		t.Errorf("pod b's record is %s; want Assigned (the refused call gave it nothing)", a.Phase)
	}
	// A partial overlap is refused too.
	partial := append(unitIDs(card0.UUID, 2, 2), unitIDs(card0.UUID, 4, 2)...)
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: partial}}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Allocate of units 2–5 (2–3 held by pod a): %v; want FailedPrecondition", err)
	}
	// Free units are given as before.
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: unitIDs(card0.UUID, 4, 4)}}}); err != nil {
		t.Fatalf("Allocate of free units: %v", err)
	}
}

// Should the kubelet offer units its own account shows held by a live pod
// (a forgotten reservation), GetPreferredAllocation does not prefer them.
func TestPreferredAllocationSkipsUnitsTheKubeletShowsHeld(t *testing.T) {
	p, _, _, card0 := kubeletPlugin(t)
	resp, err := p.units.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: unitIDs(card0.UUID, 0, 8), AllocationSize: 4,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.ContainerResponses[0].DeviceIDs
	if podresources.IDsKey(got) != podresources.IDsKey(unitIDs(card0.UUID, 4, 4)) {
		t.Errorf("preferred %v; want units 4–7 of card 0 (0–3 are pod a's)", got)
	}
}

// A kubelet that does not serve Get (feature gate KubeletPodResourcesGet
// off, before 1.34): the plugin decides on its own memory and does not fall
// back to List.
func TestGetDisabledDecidesOnMemoryWithoutList(t *testing.T) {
	ctx := context.Background()
	p, srv, mem, card0 := kubeletPlugin(t)
	srv.DisableGet()
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: unitIDs(card0.UUID, 4, 4)}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := srv.Calls(); list != 0 {
		t.Errorf("the plugin called PodResources List %d times with Get disabled; want never", list)
	}
	if a := mem.record(t, "b"); a.Phase != api.PhaseAllocated {
		t.Errorf("pod b's record is %s; want Allocated (decided on the plugin's memory)", a.Phase)
	}
}

// frozenCluster is a memCluster whose pod cache stopped at one moment: its
// Pods() show the pods as they were then, while record writes go on.
type frozenCluster struct {
	*memCluster
	cache []*corev1.Pod
}

func (c *frozenCluster) freeze() {
	c.cache, _ = c.memCluster.Pods()
}

func (c *frozenCluster) Pods() ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, len(c.cache))
	for i, p := range c.cache {
		out[i] = p.DeepCopy()
	}
	return out, nil
}

// Card 0 (8 GiB) holds x (4, running) and a's plan (4); b (4) is planned on
// card 1. The kubelet admits b with units of card 0; the plugin guessed a
// and recorded it Allocated there. Reconciliation reads the kubelet's
// account before the pod cache shows the guess: the wrongly guessed a must
// still be written back to Assigned (its record in the API is Allocated),
// else card 0's Allocated records hold x, a and b: 12 of 8 GiB.
func TestReconcileReopensAGuessTheCacheDoesNotShowYet(t *testing.T) {
	ctx := context.Background()
	sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
	store := sn.Store
	c0, c1 := sn.Cards[0], sn.Cards[1]
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	mem.pods = append(mem.pods,
		podtest.Bound(nodeName, "x", 0).GPU("main", 4).Assign(api.PhaseAllocated, c0).Phase(corev1.PodRunning).Obj(),
		podtest.Bound(nodeName, "a", 1).GPU("main", 4).Assign(api.PhaseAssigned, c0).Obj(),
		podtest.Bound(nodeName, "b", 2).GPU("main", 4).Assign(api.PhaseAssigned, c1).Obj(),
	)
	cl := &frozenCluster{memCluster: mem}
	cl.freeze()
	podres := &fakePodResources{}
	held := []podresources.Holding{{Namespace: "ns", Pod: "x", Container: "main", IDs: unitIDs(c0.UUID, 0, 4)}}
	podres.set(held...)
	p := New(Config{PluginDir: t.TempDir()}, store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	ids := unitIDs(c0.UUID, 4, 4)
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
		t.Fatal(err)
	}
	if a := mem.record(t, "a"); a.Phase != api.PhaseAssigned {
		t.Fatalf("a's record after the guess: %s; want Assigned (the guess names its planned card: nothing written)", a.Phase)
	}
	podres.set(append(held, podresources.Holding{Namespace: "ns", Pod: "b", Container: "main", IDs: ids})...)
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	allocated := map[string]int64{}
	for _, name := range []string{"x", "a", "b"} {
		if a := mem.record(t, name); a.Phase == api.PhaseAllocated {
			allocated[a.Containers[0].CardUUID] += a.Containers[0].Units
		}
	}
	if allocated[c0.UUID] > 8 {
		t.Errorf("card 0's Allocated records hold %d of 8 GiB (a's record is %s)", allocated[c0.UUID], mem.record(t, "a").Phase)
	}
}

// The kubelet adds a pod to its pod manager just before it admits it, and
// its PodResources API answers for the pods there: of two pending 4 GiB
// pods, the one it knows is the one it admits, even when the other one is
// older (same-second creation times reach the kubelet in any order). Its
// card is preferred and its record is the one written, without correcting
// the older pod's plan onto the card the kubelet gave.
func TestThePodTheKubeletKnowsIsTheOneItAdmits(t *testing.T) {
	ctx := context.Background()
	p, srv, mem, card0 := kubeletPlugin(t)
	card1 := p.store.Cards()[1]
	mem.mu.Lock()
	mem.pods = append(mem.pods, podtest.Bound(nodeName, "c", 2).GPU("main", 4).Assign(api.PhaseAssigned, podtest.Card{UUID: card1.UUID, Index: card1.Index}).Obj())
	mem.mu.Unlock()
	srv.Know("ns", "c")

	avail := append(unitIDs(card0.UUID, 4, 4), unitIDs(card1.UUID, 0, 8)...)
	resp, err := p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: avail, AllocationSize: 4,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetContainerResponses()[0].GetDeviceIDs(), unitIDs(card1.UUID, 0, 4); !slices.Equal(got, want) {
		t.Errorf("preferred %v; want %v, units of card 1, pod c's card (the pod the kubelet admits)", got, want)
	}
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: unitIDs(card1.UUID, 0, 4)}}}); err != nil {
		t.Fatal(err)
	}
	if a := mem.record(t, "c"); a.Phase != api.PhaseAssigned || a.Containers[0].CardUUID != card1.UUID {
		t.Errorf("pod c's record: %s on %s; want Assigned on card 1 (right as planned)", a.Phase, a.Containers[0].CardUUID)
	}
	if a := mem.record(t, "b"); a.Phase != api.PhaseAssigned || a.Containers[0].CardUUID != card0.UUID {
		t.Errorf("pod b's record: %s on %s; want its plan untouched, Assigned on card 0", a.Phase, a.Containers[0].CardUUID)
	}
}

// vanishingCluster is a memCluster whose pod cache loses pod gone after its
// first listing: a deletion between the plugin's read of the kubelet's
// account and its look at the cache.
type vanishingCluster struct {
	*memCluster
	gone   string
	listed bool
}

func (c *vanishingCluster) Pods() ([]*corev1.Pod, error) {
	pods, err := c.memCluster.Pods()
	if !c.listed {
		c.listed = true
		return pods, err
	}
	return slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return p.Name == c.gone }), err
}

// A pod the kubelet's account shows holding units, deleted before the plugin
// looks at its pod cache (the end of a burst: its namespace deleted), is
// gone: reconciliation has nothing to repair for it, and goes on.
func TestReconcileSkipsAHolderDeletedSinceTheAccountWasRead(t *testing.T) {
	sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
	card0 := sn.Cards[0]
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	mem.pods = append(mem.pods, podtest.Bound(nodeName, "a", 0).GPU("main", 4).Phase(corev1.PodRunning).Obj())
	srv := podrestest.Start(t, string(api.DefaultNames().ResourceName()))
	srv.Hold("ns", "a", "main", unitIDs(card0.UUID, 0, 4)...)
	podres := &podresources.Kubelet{Socket: srv.Socket, Resource: string(api.DefaultNames().ResourceName())}
	cl := &vanishingCluster{memCluster: mem, gone: "a"}
	p := New(Config{PluginDir: t.TempDir()}, sn.Store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	if err := p.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// hidingCluster is a memCluster whose pod cache does not show pod hidden
// yet: the informer delivers a binding after the kubelet's watch did.
type hidingCluster struct {
	*memCluster
	hidden atomic.Pointer[string]
}

func (c *hidingCluster) Pods() ([]*corev1.Pod, error) {
	pods, err := c.memCluster.Pods()
	hidden := c.hidden.Load()
	return slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return hidden != nil && p.Name == *hidden }), err
}

// Two 4 GiB pods: a (planned on card 1) and b (planned on card 0). The
// kubelet admits a first, before the plugin's pod cache shows it, and gives
// it units of card 0; the plugin can only guess b. The kubelet records those
// units as a's, then admits b and calls again: its account shows b known and
// holding nothing, so the guess naming b was never the kubelet's, and the
// call is b's. Kept, the guess hid b from the queue: with a still out of the
// cache the call was refused (NotFound, the pod failed); with a reaching the
// cache between the plugin's read of the account and its decision, the call
// went to a, and the two running pods were each recorded on the other's card
// (the chaos run's violation). The records must end on the cards the kubelet
// gave.
func TestAGuessTheKubeletNeverRecordedDoesNotHideThePodItAdmits(t *testing.T) {
	for _, tc := range []struct {
		name string
		// shown: a reaches the cache once the plugin has read b's account.
		shown bool
	}{
		{"a stays out of the cache", false},
		{"a reaches the cache between the read and the decision", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
			c0, c1 := sn.Cards[0], sn.Cards[1]
			mem := &memCluster{arrival: map[types.UID]uint64{}}
			mem.pods = append(mem.pods,
				podtest.Bound(nodeName, "a", 0).GPU("main", 4).Assign(api.PhaseAssigned, c1).Obj(),
				podtest.Bound(nodeName, "b", 1).GPU("main", 4).Assign(api.PhaseAssigned, c0).Obj(),
			)
			srv := podrestest.Start(t, string(api.DefaultNames().ResourceName()))
			podres := &podresources.Kubelet{Socket: srv.Socket, Resource: string(api.DefaultNames().ResourceName())}
			cl := &hidingCluster{memCluster: mem}
			hidden := "a"
			cl.hidden.Store(&hidden)
			p := New(Config{PluginDir: t.TempDir()}, sn.Store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
			allocate := func(ids []string) error {
				_, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
				return err
			}

			srv.Know("ns", "a")
			forA, forB := unitIDs(c0.UUID, 0, 4), unitIDs(c1.UUID, 0, 4)
			if err := allocate(forA); err != nil {
				t.Fatalf("the kubelet's call for a (not in the cache): %v", err)
			}
			srv.Hold("ns", "a", "main", forA...)
			srv.Know("ns", "b")
			if tc.shown {
				srv.AfterGet = func(_, name string) {
					if name == "b" {
						cl.hidden.Store(nil)
					}
				}
			}
			if err := allocate(forB); err != nil {
				t.Fatalf("the kubelet's call for b, after a guess named b for a's units: %v; want b given units of card 1", err)
			}
			srv.Hold("ns", "b", "main", forB...)
			if a := mem.record(t, "b"); a.Containers[0].CardUUID != c1.UUID {
				t.Errorf("pod b's record after its own call: %s on %s; want card 1, the card the kubelet gave it", a.Phase, a.Containers[0].CardUUID)
			}
			cl.hidden.Store(nil)
			for _, ids := range [][]string{forA, forB} {
				if _, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
					t.Fatal(err)
				}
			}
			for name, want := range map[string]string{"a": c0.UUID, "b": c1.UUID} {
				if a := mem.record(t, name); a.Containers[0].CardUUID != want {
					t.Errorf("pod %s's record when its container starts: %s on %s; want %s", name, a.Phase, a.Containers[0].CardUUID, want)
				}
			}
		})
	}
}
