// Package dra is the node agent's Dynamic Resource Allocation mode: a DRA
// kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin) that
// publishes one device per card in a ResourceSlice, with the card's memory
// as consumable capacity (several claims share a card, each consuming part
// of it), and prepares a claim by handing its containers the same grant the
// device plugin gives (plugin.Config.Response) through a CDI spec. The
// scheduler's DRA allocator picks the card; the node agent's inventory
// (deviceplugin/inventory) is the one source of the cards, their health and
// isolation.
package dra

import (
	"fmt"
	"strings"
	"unicode"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
)

// Capacity and attribute names of a card device: the contract's
// (api.DRACapacityMemory, ...). A claim asks for capacity.requests.memory; a
// selector reads device.attributes["<driver>"].model, .uuid or .index.
const (
	CapacityMemory = api.DRACapacityMemory
	AttributeModel = api.DRAAttributeModel
	AttributeUUID  = api.DRAAttributeUUID
	AttributeIndex = api.DRAAttributeIndex
)

// DriverName is the DRA driver's name (api.Names.DRADriver): the annotation
// domain (--domain), so that one cluster's names stay together
// (gpushare.example.com).
func DriverName(names api.Names) string { return names.DRADriver() }

// DeviceName names card index in the slice: card-0, card-1, ...
// (api.DRADeviceName).
func DeviceName(index int) string { return api.DRADeviceName(index) }

// CardIndex is the card a device name names (false: not one of ours).
func CardIndex(device string) (int, bool) { return api.DRACardIndex(device) }

// Quantity is units of unit as a resource.Quantity (10 GiB: "10Gi").
func Quantity(units int64, unit api.MemoryUnit) resource.Quantity {
	return api.DRAQuantity(units, unit)
}

// Units is q in whole units of unit, rounded up (a claim for 1.5Gi in GiB
// consumes 2, as the request policy's step rounds it; api.DRAUnits).
func Units(q resource.Quantity, unit api.MemoryUnit) int64 { return api.DRAUnits(q, unit) }

// Devices are the slice devices (of the driver of names) for inv: one per card, shareable
// (allowMultipleAllocations), its offered memory (Card.Units of inv.Unit)
// less what held says device-plugin pods hold on it (Held) as capacity
// "memory" that claims consume in whole units (default one unit, step one
// unit). A card with nothing left is left out. An unhealthy or isolated card
// carries a NoSchedule device taint (Names.DeviceTaintUnhealthy with the
// reason, Names.DeviceTaintIsolated): no new claim is allocated on it, and the claims
// already on it keep it.
func Devices(names api.Names, inv api.Inventory, held map[int]int64) []resourceapi.Device {
	unit := inv.Unit
	one := Quantity(1, unit)
	var out []resourceapi.Device
	for _, c := range inv.Cards {
		units := c.Units - held[c.Index]
		if units <= 0 {
			continue
		}
		out = append(out, resourceapi.Device{
			Name:                     DeviceName(c.Index),
			AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttributeModel: {StringValue: ptr.To(c.Model)},
				AttributeUUID:  {StringValue: ptr.To(c.UUID)},
				AttributeIndex: {IntValue: ptr.To(int64(c.Index))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory: {
					Value: Quantity(units, unit),
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    ptr.To(one),
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(one), Step: ptr.To(one)},
					},
				},
			},
			Taints: taints(names, c),
		})
	}
	return out
}

func taints(names api.Names, c api.Card) []resourceapi.DeviceTaint {
	switch c.State {
	case api.CardHealthy:
		return nil
	case api.CardUnhealthy:
		return []resourceapi.DeviceTaint{{Key: names.DeviceTaintUnhealthy(), Value: labelValue(c.Reason), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	default:
		return []resourceapi.DeviceTaint{{Key: names.DeviceTaintIsolated(), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
}

// labelValue makes s a label value: runs of other characters become one
// '-', at most 63 characters, starting and ending alphanumeric.
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

// errNotOurs says an allocation result names a device this node does not
// have.
func errNotOurs(pool, device string) error {
	return fmt.Errorf("the claim is allocated device %s/%s, which is not a card of this node's pool: the ResourceSlice changed since the allocation; delete the pod so that it is scheduled again", pool, device)
}
