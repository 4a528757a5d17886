package plugin

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/internal/podtest"
)

// wholeHarness is a harness with the whole-card resource registered too,
// and a client of its socket.
func wholeHarness(t *testing.T, s setup) (*harness, pluginapi.DevicePluginClient) {
	t.Helper()
	s.cfg.WholeCards = true
	if s.podres {
		s.cfg.WholePodResources = &fakePodResources{}
	}
	h := newHarness(t, s)
	// newHarness consumed one of the two registrations.
	h.kubelet.waitRegistration(t)
	conn, err := grpc.NewClient("unix://"+h.plugin.WholeSocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return h, pluginapi.NewDevicePluginClient(conn)
}

func allocateWhole(dp pluginapi.DevicePluginClient, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := dp.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0], nil
}

// healthOf is "ID=Healthy|Unhealthy" per device, sorted; units are summed per
// card ("card=Healthy×8").
func healthOf(devs []*pluginapi.Device) []string {
	count := map[string]int{}
	for _, d := range devs {
		id := d.ID
		if card, _, err := api.ParseUnitID(d.ID); err == nil {
			id = card + " units"
		}
		count[id+"="+d.Health]++
	}
	var out []string
	for k := range count {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		t.Fatalf("err = %v, want %v containing %q", err, code, text)
	}
}

func TestWholeCardsRegisterOnTheirOwnSocket(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{WholeCards: true}})
	second := h.kubelet.waitRegistration(t)
	h.hup <- nil // SIGHUP restarts both endpoints
	got := map[string]string{second.ResourceName: second.Endpoint}
	for range 2 {
		r := h.kubelet.waitRegistration(t)
		got[r.ResourceName] = r.Endpoint
		if r.ResourceName == string(api.DefaultNames().WholeResourceName()) && r.Options.GetPreStartRequired() {
			t.Errorf("whole-card registration asks for PreStartContainer: %v", r.Options)
		}
	}
	want := map[string]string{string(api.DefaultNames().ResourceName()): "gpushare.sock", string(api.DefaultNames().WholeResourceName()): "gpushare-whole.sock"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
}

// Whole cards reach the container as a share's card does (response.Config.Whole):
// with the envvar strategy and index IDs, their indexes in
// NVIDIA_VISIBLE_DEVICES and no mount.
func TestWholeCardsFollowTheDeviceListStrategy(t *testing.T) {
	h, whole := wholeHarness(t, setup{cfg: Config{Config: response.Config{Strategy: response.StrategyEnvvar, DeviceIDStrategy: response.DeviceIDIndex}}, pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{podtest.Bound(nodeName, "w", 0).Whole("train", 2).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0], c[1]}).Obj()}
	}})
	r, err := allocateWhole(whole, h.cards[1].UUID, h.cards[0].UUID)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs[api.EnvNvidiaVisibleDevices]; got != "0,1" || len(r.Mounts) != 0 {
		t.Errorf("%s = %q with %d mounts, want \"0,1\" and none", api.EnvNvidiaVisibleDevices, got, len(r.Mounts))
	}
}

func TestWholeCardAllocateGivesEveryCardAndRecordsIt(t *testing.T) {
	h, whole := wholeHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{podtest.Bound(nodeName, "w", 0).Whole("train", 2).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0], c[1]}).Obj()}
	}})
	u0, u1 := h.cards[0].UUID, h.cards[1].UUID
	if diff := cmp.Diff([]string{u0 + "=Healthy", u1 + "=Healthy"}, healthOf(h.plugin.whole.Devices())); diff != "" {
		t.Errorf("whole-card devices (-want +got):\n%s", diff)
	}
	pref, err := whole.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{u1, u0}, AllocationSize: 2}}})
	if err != nil || len(pref.ContainerResponses[0].DeviceIDs) != 2 {
		t.Fatalf("preferred: %v, %v", pref, err)
	}
	r, err := allocateWhole(whole, u1, u0)
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, m := range r.Mounts {
		mounts = append(mounts, m.ContainerPath+"<-"+m.HostPath)
	}
	wantMounts := []string{api.VisibleDevicesVolumeRoot + "/" + u0 + "<-/dev/null", api.VisibleDevicesVolumeRoot + "/" + u1 + "<-/dev/null"}
	if diff := cmp.Diff(wantMounts, mounts); diff != "" {
		t.Errorf("mounts, one per card (-want +got):\n%s", diff)
	}
	wantEnv := map[string]string{api.EnvNvidiaVisibleDevices: api.VisibleDevicesVolumeRoot, api.EnvWholeCards: "2", api.EnvCardUUID: u0 + "," + u1, api.EnvCardIndex: "0,1"}
	if diff := cmp.Diff(wantEnv, r.Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	a := h.record(t, "w")
	if a.Phase != api.PhaseAllocated || !cmp.Equal(a.WholeCards[0].CardUUIDs, []string{u0, u1}) {
		t.Errorf("record = %+v, want Allocated with both cards", a)
	}
	// A repeat for the same cards gets the same answer.
	if _, err := allocateWhole(whole, u0, u1); err != nil {
		t.Errorf("repeated Allocate: %v", err)
	}
	// Held whole: every unit of both cards is Unhealthy to the kubelet.
	if diff := cmp.Diff([]string{u0 + " units=Unhealthy", u1 + " units=Unhealthy"}, healthOf(h.plugin.units.Devices())); diff != "" {
		t.Errorf("unit devices while held whole (-want +got):\n%s", diff)
	}
}

func TestUnitsOfACardHeldWholeAreRefused(t *testing.T) {
	h, whole := wholeHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "w", 0).Whole("train", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0]}).Obj(),
			// A record that (wrongly) puts a share on the card held whole.
			podtest.Bound(nodeName, "s", 1).GPU("main", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
		}
	}})
	u0 := h.cards[0].UUID
	if _, err := allocateWhole(whole, u0); err != nil {
		t.Fatal(err)
	}
	_, err := h.allocate(t, unitIDs(u0, 0, 2))
	wantCode(t, err, codes.FailedPrecondition, "is held whole (example.com/gpu) by pod ns/w container train; none of its example.com/gpu-mem units can be allocated")
	// The other card's units are untouched.
	if diff := cmp.Diff([]string{u0 + " units=Unhealthy", h.cards[1].UUID + " units=Healthy"}, healthOf(h.plugin.units.Devices())); diff != "" {
		t.Errorf("unit devices (-want +got):\n%s", diff)
	}
}

func TestACardWithUnitsHeldIsNeverGivenWhole(t *testing.T) {
	h, whole := wholeHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "s", 0).GPU("main", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
			podtest.Bound(nodeName, "w", 1).Whole("train", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0]}).Obj(),
		}
	}})
	u0, u1 := h.cards[0].UUID, h.cards[1].UUID
	h.mustAllocate(t, unitIDs(u0, 0, 2))
	if diff := cmp.Diff([]string{u0 + "=Unhealthy", u1 + "=Healthy"}, healthOf(h.plugin.whole.Devices())); diff != "" {
		t.Errorf("whole-card devices while units are held (-want +got):\n%s", diff)
	}
	_, err := allocateWhole(whole, u0)
	wantCode(t, err, codes.FailedPrecondition, "holds example.com/gpu-mem units of pod ns/s container main; it cannot be given whole")
	// The kubelet is steered to the free card.
	pref, err := whole.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{u0, u1}, AllocationSize: 1}}})
	if err != nil || !cmp.Equal(pref.ContainerResponses[0].DeviceIDs, []string{u1}) {
		t.Errorf("preferred = %v, %v; want the free card %s", pref, err, u1)
	}
}

func TestWholeCardsBadInput(t *testing.T) {
	h, whole := wholeHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{podtest.Bound(nodeName, "bypass", 0).Whole("main", 1).Obj()}
	}})
	u0 := h.cards[0].UUID
	_, err := allocateWhole(whole, api.UnitID(u0, 0))
	wantCode(t, err, codes.InvalidArgument, "is not the UUID of a card on this node")
	_, err = allocateWhole(whole, u0, u0)
	wantCode(t, err, codes.InvalidArgument, "appears twice")
	_, err = allocateWhole(whole, u0)
	wantCode(t, err, codes.FailedPrecondition, "pod ns/bypass has no gpushare assignment: pods requesting example.com/gpu must be scheduled by gpushare-scheduler")
	// Refused once, the pod does not block the next one; nothing else waits.
	_, err = allocateWhole(whole, u0)
	wantCode(t, err, codes.NotFound, "no pod on this node waits for that many whole cards")
}

// After a restart without the kubelet's account, the Allocated records of
// the pods still running are what the plugin knows: the units of a card
// recorded whole are refused, and the re-allocation of the recorded cards is
// a repeat.
func TestRestartKeepsWholeCardsFromTheRecords(t *testing.T) {
	h, whole := wholeHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "w", 0).Whole("train", 1).AssignWhole(api.PhaseAllocated, nil, []podtest.Card{c[1]}).Phase(corev1.PodRunning).Obj(),
			podtest.Bound(nodeName, "s", 1).GPU("main", 1).Assign(api.PhaseAssigned, c[1]).Obj(),
		}
	}})
	u1 := h.cards[1].UUID
	_, err := h.allocate(t, unitIDs(u1, 0, 1))
	wantCode(t, err, codes.FailedPrecondition, "held whole")
	if _, err := allocateWhole(whole, u1); err != nil {
		t.Errorf("re-allocation of the recorded card: %v", err)
	}
}

// With the kubelet's account, the record follows the cards the kubelet
// gave, and those are the ones held.
func TestKubeletAccountCorrectsTheWholeCardRecord(t *testing.T) {
	h, _ := wholeHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "w", 0).Whole("train", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[0]}).Phase(corev1.PodRunning).Obj(),
			podtest.Bound(nodeName, "s", 1).GPU("main", 1).Assign(api.PhaseAssigned, c[1]).Obj(),
		}
	}})
	u0, u1 := h.cards[0].UUID, h.cards[1].UUID
	h.plugin.cfg.WholePodResources.(*fakePodResources).set(podresources.Holding{Namespace: "ns", Pod: "w", Container: "train", IDs: []string{u1}})
	if err := h.plugin.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := h.record(t, "w")
	if a.Phase != api.PhaseAllocated || !cmp.Equal(a.WholeCards[0].CardUUIDs, []string{u1}) || !cmp.Equal(a.WholeCards[0].CardIndexes, []int{1}) {
		t.Errorf("record = %+v, want Allocated on card 1", a)
	}
	_, err := h.allocate(t, unitIDs(u1, 0, 1))
	wantCode(t, err, codes.FailedPrecondition, "held whole")
	if _, err := h.allocate(t, unitIDs(u0, 0, 1)); err != nil {
		t.Errorf("units of the card the kubelet did not give whole: %v", err)
	}
}

// The whole-card GetPreferredAllocation, too, waits for a pod the kubelet saw
// before the plugin's informer, and steers to the cards it was assigned
// rather than to the lowest free card.
func TestWholeGetPreferredAllocationWaitsForAPodTheKubeletSawFirst(t *testing.T) {
	var late *lateCluster
	h, whole := wholeHarness(t, setup{
		cfg:  Config{AllocateWait: 5 * time.Second},
		wrap: func(c Cluster) Cluster { late = &lateCluster{Cluster: c}; return late },
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "w", 1).Whole("train", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c[1]}).Obj()}
		},
	})
	late.mu.Lock()
	late.looked = 0 // what the harness read while starting does not count
	late.mu.Unlock()
	u0, u1 := h.cards[0].UUID, h.cards[1].UUID
	pref, err := whole.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{u0, u1}, AllocationSize: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(pref.ContainerResponses[0].DeviceIDs, []string{u1}) {
		t.Errorf("preferred %v, want the assigned card %s", pref.ContainerResponses[0].DeviceIDs, u1)
	}
}
