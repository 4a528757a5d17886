package api

import (
	"strconv"
	"strings"
	"unicode"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
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

// DRADevices are the devices of the driver's slice for inv, as the node
// agent's DRA mode publishes them: one per card, shareable
// (allowMultipleAllocations), its offered memory (Card.Units of inv.Unit)
// less what held says device-plugin pods hold on it as capacity
// DRACapacityMemory that claims consume in whole units (default one unit,
// step one unit). A card with nothing left is left out. An unhealthy or
// isolated card carries a NoSchedule device taint (DeviceTaintUnhealthy
// with the reason as a label value, DeviceTaintIsolated): no new claim is
// allocated on it, and the claims already on it keep it.
//
// Worked example: a 40 GiB card of which a device-plugin pod holds 8 is
// card-0 with memory 32Gi, request policy default 1Gi, min 1Gi, step 1Gi.
func (n Names) DRADevices(inv Inventory, held map[int]int64) []resourceapi.Device {
	unit := inv.Unit
	one := DRAQuantity(1, unit)
	var out []resourceapi.Device
	for _, c := range inv.Cards {
		units := c.Units - held[c.Index]
		if units <= 0 {
			continue
		}
		out = append(out, resourceapi.Device{
			Name:                     DRADeviceName(c.Index),
			AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				DRAAttributeModel: {StringValue: ptr.To(c.Model)},
				DRAAttributeUUID:  {StringValue: ptr.To(c.UUID)},
				DRAAttributeIndex: {IntValue: ptr.To(int64(c.Index))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				DRACapacityMemory: {
					Value: DRAQuantity(units, unit),
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    ptr.To(one),
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(one), Step: ptr.To(one)},
					},
				},
			},
			Taints: n.draTaints(c),
		})
	}
	return out
}

func (n Names) draTaints(c Card) []resourceapi.DeviceTaint {
	switch c.State {
	case CardHealthy:
		return nil
	case CardUnhealthy:
		return []resourceapi.DeviceTaint{{Key: n.DeviceTaintUnhealthy(), Value: labelValue(c.Reason), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	default:
		return []resourceapi.DeviceTaint{{Key: n.DeviceTaintIsolated(), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
}

// labelValue makes s a label value: runs of other characters become one
// '-', at most 63 characters, starting and ending alphanumeric ("XID 79
// (fallen off the bus)" is "XID-79-fallen-off-the-bus").
func labelValue(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		ok := r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	out := b.String()
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.TrimRightFunc(out, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
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

// DRAConsumedMemory is the memory an allocation result r consumes of its
// device, whose memory capacity (what the slice offers, or the card's
// memory where the caller knows no slice) is device. named is false when
// the result names none: kube-scheduler's allocator writes
// consumedCapacity for every capacity of a device it shares
// (allowMultipleAllocations) — the request, rounded up by the request
// policy, or its default when the claim asks none — and writes none when it
// gives the device whole to one claim (DRAConsumableCapacity off), so a
// result without it consumes the whole device.
//
// Worked example: a result with consumedCapacity memory 10Gi on a 40Gi
// card consumes 10Gi; one without consumedCapacity consumes all 40Gi.
func DRAConsumedMemory(r resourceapi.DeviceRequestAllocationResult, device resource.Quantity) (q resource.Quantity, named bool) {
	if q, ok := r.ConsumedCapacity[DRACapacityMemory]; ok {
		return q, true
	}
	return device, false
}

// DRARequestUnits is the memory a claim's request (or subrequest) asks of
// one device, from its capacity requirements c, in whole units of unit
// (DRAUnits): capacity.requests.memory, or one unit (the request policy's
// default) when it asks none.
func DRARequestUnits(c *resourceapi.CapacityRequirements, unit MemoryUnit) int64 {
	if c != nil {
		if q, ok := c.Requests[DRACapacityMemory]; ok {
			return DRAUnits(q, unit)
		}
	}
	return 1
}
