package api

import (
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The DRA contract: what the node agent's DRA mode publishes in its node's
// ResourceSlice and what the scheduler's DRA allocator writes in a claim's
// status, as the inspector and the extender's /inspect read them
// (DRAUsage). docs/dra.md shows a slice.
//
// A node's slice has the driver Names.DRADriver and the pool named after
// the node; each card is one device, DRADeviceName (card-0, card-1, ...),
// with the attributes DRAAttributeModel, DRAAttributeUUID and
// DRAAttributeIndex, and the capacity DRACapacityMemory: the card's memory
// offered to claims, in whole units (the request policy's step is one unit).

// Capacity and attribute names of a card device. A claim asks for
// capacity.requests.memory; a selector reads
// device.attributes["<driver>"].model, .uuid or .index.
const (
	DRACapacityMemory resourceapi.QualifiedName = "memory"
	DRAAttributeModel resourceapi.QualifiedName = "model"
	DRAAttributeUUID  resourceapi.QualifiedName = "uuid"
	DRAAttributeIndex resourceapi.QualifiedName = "index"
	draDevicePrefix                             = "card-"
)

// DRADriver is the DRA driver's name: the annotation domain (--domain), so
// that one installation's names stay together (gpushare.example.com).
func (n Names) DRADriver() string { return n.domain }

// DRADeviceName names card index in a slice: card-0, card-1, ...
func DRADeviceName(index int) string { return draDevicePrefix + strconv.Itoa(index) }

// DRACardIndex is the card a device name names (false: not one of ours).
func DRACardIndex(device string) (int, bool) {
	s, ok := strings.CutPrefix(device, draDevicePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == s
}

// DRAQuantity is units of unit as a resource.Quantity (10 GiB: "10Gi").
func DRAQuantity(units int64, unit MemoryUnit) resource.Quantity {
	return *resource.NewQuantity(units*unit.MiB()<<20, resource.BinarySI)
}

// DRAUnits is q in whole units of unit, rounded up: a claim for 1.5Gi in
// GiB consumes 2, as the request policy's step rounds it; 1536Mi in MiB is
// 1536. A unit this program does not know counts q in GiB.
func DRAUnits(q resource.Quantity, unit MemoryUnit) int64 {
	if unit.MiB() == 0 {
		unit = UnitGiB
	}
	b := unit.MiB() << 20
	return (q.Value() + b - 1) / b
}

// draUnitOf is the unit a device's memory is counted in: its request
// policy's step (or default), which the node agent sets to one unit; GiB,
// the node agent's default, when the policy names no known unit.
func draUnitOf(c resourceapi.DeviceCapacity) MemoryUnit {
	var one *resource.Quantity
	if p := c.RequestPolicy; p != nil {
		one = p.Default
		if p.ValidRange != nil && p.ValidRange.Step != nil {
			one = p.ValidRange.Step
		}
	}
	if one != nil {
		for _, u := range []MemoryUnit{UnitGiB, UnitMiB} {
			if one.Value() == u.MiB()<<20 {
				return u
			}
		}
	}
	return UnitGiB
}
