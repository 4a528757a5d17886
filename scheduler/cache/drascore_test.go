package cache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The DRA verb's nodes: a card's capacity is what its slice offers and its
// use what the claims on it consume, in GiB whatever the slice's unit; a
// node with claims but no slice is left out.
func TestDRANodesCountTheClaimsOnTheirCards(t *testing.T) {
	names := api.DefaultNames()
	usage := names.DRAUsage(
		[]*resourceapi.ResourceSlice{
			dratest.Slice("a", api.UnitGiB, dratest.Card("a", 0, "A100", 40), dratest.Card("a", 1, "A100", 40)).Obj(),
			dratest.Slice("m", api.UnitMiB, dratest.Card("m", 0, "A100", 40960)).Obj(),
		},
		[]*resourceapi.ResourceClaim{
			dratest.Claim("ns", "ten").On("a", 0, "10Gi").Obj(),
			dratest.Claim("ns", "odd").On("a", 0, "1536Mi").Obj(), // rounded up: 2 GiB
			dratest.Claim("ns", "mib").On("m", 0, "5Gi").Obj(),
			dratest.Claim("ns", "lost").On("gone", 0, "5Gi").Obj(),
		})
	got := DRANodes(usage, api.UnitGiB)
	if _, ok := got["gone"]; ok || len(got) != 2 {
		t.Fatalf("nodes %v, want a and m only", got)
	}
	used := func(n *allocator.Node) (out [][2]int64) {
		for _, c := range n.Cards {
			out = append(out, [2]int64{c.Capacity, c.Used})
		}
		return out
	}
	if d := cmp.Diff([][2]int64{{40, 12}, {40, 0}}, used(got["a"])); d != "" {
		t.Errorf("node a cards (capacity, used) (-want +got):\n%s", d)
	}
	if d := cmp.Diff([][2]int64{{40, 5}}, used(got["m"])); d != "" || got["m"].Unit != api.UnitGiB {
		t.Errorf("node m (a MiB slice) cards (-want +got):\n%s", d)
	}
}

// A claim's demand: one share per device of the driver's class it asks
// for, its memory in GiB (one unit when it asks none); allocated claims,
// other classes and "All" requests ask nothing of the score.
func TestClaimDemandsReadTheRequestsOfTheDriversClass(t *testing.T) {
	class := api.DefaultNames().DRADriver()
	c := dratest.Claim("ns", "train").Obj()
	c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{api.DRACapacityMemory: resource.MustParse("20Gi")}}
	c.Spec.Devices.Requests[0].Exactly.Count = 2
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests,
		resourceapi.DeviceRequest{Name: "dflt", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}},
		resourceapi.DeviceRequest{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic.example.com"}},
		resourceapi.DeviceRequest{Name: "all", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeAll}},
	)
	want := []allocator.Demand{{Container: "train/gpu", Units: 20}, {Container: "train/gpu", Units: 20}, {Container: "train/dflt", Units: 1}}
	if d := cmp.Diff(want, ClaimDemands(c, class, api.UnitGiB)); d != "" {
		t.Errorf("demands (-want +got):\n%s", d)
	}
	if got := ClaimDemands(dratest.Claim("ns", "done").On("a", 0, "10Gi").Obj(), class, api.UnitGiB); len(got) != 0 {
		t.Errorf("an allocated claim asks %v, want nothing", got)
	}
}
