// Package dra is the node agent's Dynamic Resource Allocation mode: a DRA
// kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin) that
// publishes one device per card in a ResourceSlice, with the card's memory
// as consumable capacity (several claims share a card, each consuming part
// of it), and prepares a claim by handing its containers the same grant the
// device plugin gives (response.Config.Share) through a CDI spec. The
// scheduler's DRA allocator picks the card; the node agent's inventory
// (deviceplugin/inventory) is the one source of the cards, their health and
// isolation.
package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

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

// CardIndex is the card a device name names (false: not one of ours).
func CardIndex(device string) (int, bool) { return api.DRACardIndex(device) }

// Devices are the slice devices of the driver of names for inv, less what
// held says device-plugin pods hold on each card (Held): the contract's
// api.Names.DRADevices, where their shape is defined beside how the
// inspector and the extender read them back.
func Devices(names api.Names, inv api.Inventory, held map[int]int64) []resourceapi.Device {
	return names.DRADevices(inv, held)
}

// errNotOurs says an allocation result names a device this node does not
// have.
func errNotOurs(pool, device string) error {
	return fmt.Errorf("the claim is allocated device %s/%s, which is not a card of this node's pool: the ResourceSlice changed since the allocation; delete the pod so that it is scheduled again", pool, device)
}
