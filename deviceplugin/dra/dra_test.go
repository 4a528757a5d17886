package dra

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/internal/podtest"
)

func store(t *testing.T) *inventory.Store {
	t.Helper()
	s, err := inventory.New(api.UnitGiB, []nvml.Card{
		{Index: 0, UUID: "GPU-aaa", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960},
		{Index: 1, UUID: "GPU-bbb", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960},
		{Index: 2, UUID: "GPU-ccc", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDevicesOfferEachCardsMemoryAsSharedCapacity(t *testing.T) {
	s := store(t)
	s.SetUnhealthy("GPU-bbb", "XID 79 (fallen off the bus)")
	devices := Devices(api.DefaultNames(), s.Inventory(), nil)
	var names []string
	for _, d := range devices {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"card-0", "card-1", "card-2"}) {
		t.Fatalf("devices %v, want card-0, card-1, card-2", names)
	}
	if len(devices[0].Taints) != 0 {
		t.Errorf("healthy card-0 tainted: %v", devices[0].Taints)
	}
	want := resourceapi.DeviceTaint{Key: "gpushare.example.com/unhealthy", Value: "XID-79-fallen-off-the-bus", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if got := devices[1].Taints; len(got) != 1 || got[0] != want {
		t.Errorf("unhealthy card-1 taints %v, want %v", got, want)
	}
	h100 := devices[2]
	if h100.AllowMultipleAllocations == nil || !*h100.AllowMultipleAllocations {
		t.Error("a card is not shareable")
	}
	c := h100.Capacity[CapacityMemory]
	if want := resource.MustParse("79Gi"); c.Value.Cmp(want) != 0 {
		t.Errorf("H100 memory %s, want %s (81,559 MiB in whole GiB)", c.Value.String(), want.String())
	}
	if p := c.RequestPolicy; p == nil || p.Default.String() != "1Gi" || p.ValidRange.Min.String() != "1Gi" || p.ValidRange.Step.String() != "1Gi" {
		t.Errorf("request policy %+v, want default, min and step 1Gi", p)
	}
	if got := *h100.Attributes[AttributeUUID].StringValue; got != "GPU-ccc" {
		t.Errorf("uuid attribute %q", got)
	}
	if got := *h100.Attributes[AttributeIndex].IntValue; got != 2 {
		t.Errorf("index attribute %d", got)
	}
	if got := *h100.Attributes[AttributeModel].StringValue; got != "NVIDIA H100 80GB HBM3" {
		t.Errorf("model attribute %q", got)
	}

	s.SetIsolation("test", api.Isolation{Index: []int{0}})
	got := Devices(api.DefaultNames(), s.Inventory(), nil)
	if want := (resourceapi.DeviceTaint{Key: "gpushare.example.com/isolated", Effect: resourceapi.DeviceTaintEffectNoSchedule}); len(got[0].Taints) != 1 || got[0].Taints[0] != want {
		t.Errorf("isolated card-0 taints %v, want %v", got[0].Taints, want)
	}
	s.SetUnhealthy("GPU-ccc", strings.Repeat("x", 70)+"!")
	if v := Devices(api.DefaultNames(), s.Inventory(), nil)[2].Taints[0].Value; len(v) != 63 {
		t.Errorf("a long reason gives the taint value %q (%d characters), want 63", v, len(v))
	}
}

func TestCardIndexAndUnits(t *testing.T) {
	for name, want := range map[string]int{"card-0": 0, "card-12": 12} {
		if got, ok := CardIndex(name); !ok || got != want {
			t.Errorf("CardIndex(%q) = %d, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"card-", "card--1", "card-01", "gpu-0", "card-x"} {
		if _, ok := CardIndex(bad); ok {
			t.Errorf("CardIndex(%q) accepted", bad)
		}
	}
	if got := api.DRAUnits(resource.MustParse("1536Mi"), api.UnitGiB); got != 2 {
		t.Errorf("1536Mi in GiB = %d, want 2 (rounded up)", got)
	}
	if got := api.DRAUnits(resource.MustParse("10Gi"), api.UnitMiB); got != 10240 {
		t.Errorf("10Gi in MiB = %d", got)
	}
}

// claim is an allocated claim whose requests (one per result's request
// name) ask for what the results consume, as the scheduler allocates them.
func claim(uid, namespace string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: namespace, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}},
	}
	for _, r := range results {
		if slices.ContainsFunc(c.Spec.Devices.Requests, func(q resourceapi.DeviceRequest) bool { return q.Name == r.Request }) {
			continue
		}
		req := resourceapi.DeviceRequest{Name: r.Request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpushare.example.com"}}
		if q, ok := r.ConsumedCapacity[CapacityMemory]; ok {
			req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: q}}
		}
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, req)
	}
	return c
}

func result(request, pool, device, memory string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpushare.example.com", Pool: pool, Device: device}
	if memory != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: resource.MustParse(memory)}
	}
	return r
}

func TestPrepareHandsTheClaimTheDevicePluginsGrantThroughCDI(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{Name: "gpushare.example.com", Pool: "gpu-1", Store: store(t), CDIDir: dir,
		Grant: response.Config{Names: api.DefaultNames(), Strategy: response.StrategyVolumeMounts, DeviceIDStrategy: response.DeviceIDUUID}}
	other := result("other", "gpu-1", "nic-0", "")
	other.Driver = "nic.example.com"
	got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{
		claim("u1", "team", result("gpu", "gpu-1", "card-2", "10Gi"), other),
		claim("u2", "team", result("gpu", "gpu-2", "card-0", "10Gi")),
		{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "team", UID: "u3"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ok := got["u1"]
	if ok.Err != nil || len(ok.Devices) != 1 {
		t.Fatalf("u1: %+v", ok)
	}
	want := kubeletplugin.Device{Requests: []string{"gpu"}, PoolName: "gpu-1", DeviceName: "card-2", CDIDeviceIDs: []string{"gpushare.example.com/claim=u1-gpu-card-2"}}
	if dev := ok.Devices[0]; dev.PoolName != want.PoolName || dev.DeviceName != want.DeviceName || !slices.Equal(dev.Requests, want.Requests) || !slices.Equal(dev.CDIDeviceIDs, want.CDIDeviceIDs) {
		t.Errorf("u1 device %+v, want %+v", dev, want)
	}
	if e := got["u2"].Err; e == nil || !strings.Contains(e.Error(), "not a card of this node's pool") {
		t.Errorf("u2 (another node's pool): %v", e)
	}
	if e := got["u3"].Err; e == nil || !strings.Contains(e.Error(), "not allocated") {
		t.Errorf("u3 (not allocated): %v", e)
	}

	b, err := os.ReadFile(filepath.Join(dir, "gpushare.example.com-claim_u1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if err := cdispec.ValidateVersion(&spec); err != nil || spec.Kind != "gpushare.example.com/claim" || len(spec.Devices) != 1 || spec.Devices[0].Name != "u1-gpu-card-2" {
		t.Fatalf("spec %s: %v", b, err)
	}
	edits := spec.Devices[0].ContainerEdits
	for _, env := range []string{"GPUSHARE_MEMORY_UNITS=10", "GPUSHARE_CARD_UUID=GPU-ccc", "GPUSHARE_CARD_INDEX=2", "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"} {
		if !slices.Contains(edits.Env, env) {
			t.Errorf("env %v lacks %s", edits.Env, env)
		}
	}
	if len(edits.Mounts) != 1 || edits.Mounts[0].ContainerPath != "/var/run/nvidia-container-devices/GPU-ccc" || edits.Mounts[0].HostPath != "/dev/null" || !slices.Contains(edits.Mounts[0].Options, "ro") {
		t.Errorf("mounts %+v, want /dev/null read-only at the card's device-list path", edits.Mounts)
	}

	// Unpreparing removes the spec, and again is no error.
	for range 2 {
		res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "u1"}})
		if err != nil || res["u1"] != nil {
			t.Fatalf("unprepare: %v %v", res, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gpushare.example.com-claim_u1.json")); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
}

func TestPrepareNamesNvidiasCDIDeviceWhenAsked(t *testing.T) {
	d := &Driver{Name: "gpushare.example.com", Pool: "gpu-1", Store: store(t), CDIDir: t.TempDir(), NvidiaCDIKind: "nvidia.com/gpu",
		Grant: response.Config{Names: api.DefaultNames(), Strategy: response.StrategyEnvvar}}
	c := claim("u1", "team", result("gpu", "gpu-1", "card-0", "2Gi"))
	c.Spec.Devices.Requests[0].Exactly.Capacity.Requests[CapacityMemory] = resource.MustParse("1536Mi") // rounded up to a unit
	got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || got["u1"].Err != nil {
		t.Fatal(err, got["u1"].Err)
	}
	if ids := got["u1"].Devices[0].CDIDeviceIDs; !slices.Equal(ids, []string{"gpushare.example.com/claim=u1-gpu-card-0", "nvidia.com/gpu=GPU-aaa"}) {
		t.Errorf("CDI IDs %v", ids)
	}
}

// A node moved from the device plugin to DRA keeps its running
// device-plugin pods: their memory stays out of the slice until they finish.
func TestDevicePluginPodsMemoryIsWithheldFromTheSlice(t *testing.T) {
	s := store(t)
	names := api.DefaultNames()
	pods := []*corev1.Pod{
		podtest.Make("team", "ten").GPU("c", 10).AssignOn("gpu-1", api.PhaseAllocated, 0).Phase(corev1.PodRunning).Obj(),
		podtest.Make("team", "five").GPU("c", 5).AssignOn("gpu-1", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
		podtest.Make("team", "whole").Whole("w", 1).AssignWholeOn("gpu-1", api.PhaseAllocated, nil, []int{1}).Phase(corev1.PodRunning).Obj(),
		podtest.Make("team", "done").GPU("c", 30).AssignOn("gpu-1", api.PhaseAllocated, 2).Phase(corev1.PodSucceeded).Obj(),
		podtest.Make("team", "elsewhere").GPU("c", 30).AssignOn("gpu-2", api.PhaseAllocated, 2).Phase(corev1.PodRunning).Obj(),
		podtest.Make("team", "no-record").Node("gpu-1").Phase(corev1.PodRunning).Obj(),
	}
	held := Held(names, s.Inventory(), "gpu-1", pods)
	if want := map[int]int64{0: 15, 1: 40}; !maps.Equal(held, want) {
		t.Fatalf("held %v, want %v", held, want)
	}
	devices := Devices(api.DefaultNames(), s.Inventory(), held)
	if len(devices) != 2 || devices[0].Name != "card-0" || devices[1].Name != "card-2" {
		t.Fatalf("devices %v, want card-0 (25 left) and card-2 (card-1 is held whole)", devices)
	}
	if got := devices[0].Capacity[CapacityMemory].Value; got.Cmp(resource.MustParse("25Gi")) != 0 {
		t.Errorf("card-0 offers %s, want 25Gi (40 less 10 and 5 held)", got.String())
	}
	if got := devices[1].Capacity[CapacityMemory].Value; got.Cmp(resource.MustParse("79Gi")) != 0 {
		t.Errorf("card-2 offers %s, want all 79Gi (its pod finished)", got.String())
	}
	if got := api.ConvertUnitsUp(1536, api.UnitMiB, api.UnitGiB); got != 2 {
		t.Errorf("1536 MiB held = %d GiB, want 2 (rounded up)", got)
	}
}
