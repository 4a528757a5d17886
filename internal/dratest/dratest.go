// Package dratest builds the DRA objects gpushare's tests use: the
// ResourceSlice the node agent's DRA mode publishes for a node and the
// ResourceClaims the scheduler's DRA allocator allocates on its cards, in the
// style of kube-scheduler's st.MakePod():
//
//	dratest.Slice("n1", api.UnitGiB, dratest.Card("n1", 0, "NVIDIA A100", 40)).Obj()
//	dratest.Claim("ns", "ten").On("n1", 0, "10Gi").ReservedFor("train").Obj()
//
// A slice's devices are the node agent's own (api.Names.DRADevices), so a
// test only reads slices the real program would write, unless it adds a
// device of its own (Device). Names are api.DefaultNames'; a card's UUID is
// podtest.CardUUID's, so that pods' records name the same cards.
package dratest

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// Card is a healthy card of node with units of memory; its UUID is
// podtest.CardUUID(node, index).
func Card(node string, index int, model string, units int64) api.Card {
	return api.Card{Index: index, UUID: podtest.CardUUID(node, index), Model: model, Units: units, State: api.CardHealthy}
}

// SliceBuilder builds a ResourceSlice.
type SliceBuilder struct {
	s resourceapi.ResourceSlice
}

// Slice is the slice the node agent publishes for node with cards in unit:
// driver api.DefaultNames().DRADriver(), pool node, generation 1, one device
// per card (api.Names.DRADevices, nothing held by device-plugin pods).
func Slice(node string, unit api.MemoryUnit, cards ...api.Card) *SliceBuilder {
	return SliceHolding(node, unit, nil, cards...)
}

// SliceHolding is Slice with the units device-plugin pods hold per card
// index withheld, as the node agent withholds them (deviceplugin/dra.Held).
func SliceHolding(node string, unit api.MemoryUnit, held map[int]int64, cards ...api.Card) *SliceBuilder {
	names := api.DefaultNames()
	inv := api.Inventory{Version: api.InventoryVersion, Unit: unit, Cards: cards}
	b := &SliceBuilder{s: resourceapi.ResourceSlice{
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   names.DRADriver(),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  names.DRADevices(inv, held),
		},
	}}
	return b.named()
}

// Driver makes the slice another driver's.
func (b *SliceBuilder) Driver(name string) *SliceBuilder {
	b.s.Spec.Driver = name
	return b.named()
}

// Generation sets the pool's generation.
func (b *SliceBuilder) Generation(g int64) *SliceBuilder {
	b.s.Spec.Pool.Generation = g
	return b.named()
}

// named names the slice after its pool, driver and generation.
func (b *SliceBuilder) named() *SliceBuilder {
	b.s.Name = fmt.Sprintf("%s-%s-%d", b.s.Spec.Pool.Name, b.s.Spec.Driver, b.s.Spec.Pool.Generation)
	return b
}

// Device adds a device of the test's own.
func (b *SliceBuilder) Device(d resourceapi.Device) *SliceBuilder {
	b.s.Spec.Devices = append(b.s.Spec.Devices, d)
	return b
}

// Obj returns the slice.
func (b *SliceBuilder) Obj() *resourceapi.ResourceSlice { return b.s.DeepCopy() }

// ClaimBuilder builds a ResourceClaim.
type ClaimBuilder struct {
	c resourceapi.ResourceClaim
}

// Claim starts a claim with one request "gpu" for memory of one card of
// the driver's DeviceClass, not allocated yet.
func Claim(namespace, name string) *ClaimBuilder {
	return &ClaimBuilder{c: resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("claim-" + namespace + "-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: api.DefaultNames().DRADriver()},
		}}}},
	}}
}

// On allocates the claim's request "gpu" memory (e.g. "10Gi") of card index
// on node, with a share ID, as the allocator does.
func (b *ClaimBuilder) On(node string, index int, memory string) *ClaimBuilder {
	return b.Result(api.DefaultNames().DRADriver(), node, api.DRADeviceName(index), memory)
}

// Result adds an allocation result of driver for device of pool (empty
// memory: the result names no consumed capacity).
func (b *ClaimBuilder) Result(driver, pool, device, memory string) *ClaimBuilder {
	if b.c.Status.Allocation == nil {
		b.c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	r := resourceapi.DeviceRequestAllocationResult{
		Request: "gpu", Driver: driver, Pool: pool, Device: device,
		ShareID: ptr.To(types.UID(fmt.Sprintf("share-%s-%s-%d", b.c.Name, device, len(b.c.Status.Allocation.Devices.Results)))),
	}
	if memory != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{api.DRACapacityMemory: resource.MustParse(memory)}
	}
	b.c.Status.Allocation.Devices.Results = append(b.c.Status.Allocation.Devices.Results, r)
	return b
}

// ReservedFor reserves the claim for the pods named (in its namespace).
func (b *ClaimBuilder) ReservedFor(pods ...string) *ClaimBuilder {
	for _, p := range pods {
		b.c.Status.ReservedFor = append(b.c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: p, UID: types.UID("pod-" + b.c.Namespace + "-" + p),
		})
	}
	return b
}

// Obj returns the claim.
func (b *ClaimBuilder) Obj() *resourceapi.ResourceClaim { return b.c.DeepCopy() }
