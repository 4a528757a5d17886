package api

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// DRANode is one node as the gpushare DRA driver's objects show it: the
// cards its ResourceSlice publishes and the claims allocated on them.
type DRANode struct {
	Name string
	// Sliced is true when the node has a ResourceSlice of the driver; Unit
	// and Cards come from it.
	Sliced bool
	// Unit is the unit the slice counts memory in (the node agent's
	// --memory-unit: its request policy's step); empty without a slice.
	Unit MemoryUnit
	// Cards are the slice's card devices, sorted by index.
	Cards []DRACard
	// Unplaced are the claims' shares of a device of the node's pool that
	// the slice does not list (no slice at all: every share), sorted like
	// DRACard.Claims.
	Unplaced []DRAShare
}

// DRACard is one card device of a slice with the claims allocated on it.
type DRACard struct {
	Index int
	UUID  string
	Model string
	// State is CardHealthy unless the device carries the driver's taint:
	// Names.DeviceTaintUnhealthy (Reason: the taint's value) or
	// Names.DeviceTaintIsolated.
	State  CardState
	Reason string
	// Offered is the memory the slice offers claims, in the node's Unit:
	// the card's memory less what device-plugin pods still hold on it (the
	// node agent withholds it, docs/dra.md).
	Offered int64
	// Claims are the shares allocated on the card, sorted by namespace,
	// claim name, then request.
	Claims []DRAShare
}

// DRAShare is one allocation result of a claim on one of the driver's
// devices: memory of one card consumed by one request of the claim.
type DRAShare struct {
	// Namespace, Name and UID are the claim's.
	Namespace string
	Name      string
	UID       types.UID
	// Request is the claim's request the result is for.
	Request string
	// Device is the device allocated (card-N).
	Device string
	// Memory is the capacity consumed (DRAConsumedMemory: a result that
	// names none consumes the card's whole offered memory; zero when the
	// slice does not list the device).
	Memory resource.Quantity
	// ShareID is the allocator's share ID, empty when it gave none.
	ShareID string
	// Pods are the pods the claim is reserved for (status.reservedFor), in
	// its namespace, sorted; empty while it is reserved for no pod: it is
	// allocated and holds its memory all the same.
	Pods []string
}

// Units is the memory the share consumes in whole units of unit, rounded
// up (DRAUnits).
func (s DRAShare) Units(unit MemoryUnit) int64 { return DRAUnits(s.Memory, unit) }

// DRAUsage turns the cluster's ResourceSlices and ResourceClaims into what
// the gpushare DRA driver (Names.DRADriver) holds, per node (the pool's
// name, which the node agent sets to its node's): the cards each node's
// slice publishes and the claims' shares on each card. It is a pure
// function shared by the inspector and the extender's /inspect.
//
// Only our driver's slices and allocation results count; other drivers'
// are ignored, as are devices whose name is not card-N. Of a pool's slices
// only those of its newest generation count (a slice being replaced may
// still be listed beside its successor). A claim counts when its status has
// an allocation, whether it is reserved for pods or for none, and while it
// is being deleted: until its allocation is gone the allocator gives its
// memory to no other claim.
//
// Worked example: a slice for node n1 with card-0 offering 40Gi (step 1Gi),
// claims a (10Gi, reserved for pod p) and b (20Gi, reserved for none), both
// allocated card-0 of pool n1: DRAUsage gives n1 with Unit GiB and card 0
// with Offered 40 and the shares a (10Gi, pods [p]) and b (20Gi, no pod).
func (n Names) DRAUsage(rslices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) map[string]*DRANode {
	n = n.OrDefault()
	driver := n.DRADriver()
	out := map[string]*DRANode{}
	node := func(name string) *DRANode {
		d := out[name]
		if d == nil {
			d = &DRANode{Name: name}
			out[name] = d
		}
		return d
	}
	newest := map[string]int64{}
	for _, s := range rslices {
		if s.Spec.Driver == driver {
			if g, ok := newest[s.Spec.Pool.Name]; !ok || s.Spec.Pool.Generation > g {
				newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
			}
		}
	}
	for _, s := range rslices {
		if s.Spec.Driver != driver || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		d := node(s.Spec.Pool.Name)
		d.Sliced = true
		for _, dev := range s.Spec.Devices {
			if c, ok := n.draCard(dev); ok {
				if d.Unit == "" {
					d.Unit = draUnitOf(dev.Capacity[DRACapacityMemory])
				}
				c.Offered = DRAUnits(dev.Capacity[DRACapacityMemory].Value, d.Unit)
				d.Cards = append(d.Cards, c)
			}
		}
	}
	for _, d := range out {
		slices.SortFunc(d.Cards, func(a, b DRACard) int { return cmp.Compare(a.Index, b.Index) })
	}

	for _, cl := range claims {
		if cl.Status.Allocation == nil {
			continue
		}
		var pods []string
		for _, r := range cl.Status.ReservedFor {
			if r.APIGroup == "" && r.Resource == "pods" {
				pods = append(pods, r.Name)
			}
		}
		slices.Sort(pods)
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != driver {
				continue
			}
			share := DRAShare{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID, Request: r.Request, Device: r.Device, Pods: slices.Clone(pods)}
			if r.ShareID != nil {
				share.ShareID = string(*r.ShareID)
			}
			d := node(r.Pool)
			placed := false
			if index, ok := DRACardIndex(r.Device); ok {
				for i := range d.Cards {
					if d.Cards[i].Index == index {
						share.Memory, _ = DRAConsumedMemory(r, DRAQuantity(d.Cards[i].Offered, d.Unit))
						d.Cards[i].Claims = append(d.Cards[i].Claims, share)
						placed = true
						break
					}
				}
			}
			if !placed {
				share.Memory, _ = DRAConsumedMemory(r, resource.Quantity{})
				d.Unplaced = append(d.Unplaced, share)
			}
		}
	}
	for _, d := range out {
		for i := range d.Cards {
			slices.SortFunc(d.Cards[i].Claims, draShareCompare)
		}
		slices.SortFunc(d.Unplaced, draShareCompare)
	}
	return out
}

// draCard reads a device of the driver's slice; false when it is not a
// card (its name is not card-N).
func (n Names) draCard(dev resourceapi.Device) (DRACard, bool) {
	index, ok := DRACardIndex(dev.Name)
	if !ok {
		return DRACard{}, false
	}
	c := DRACard{Index: index, State: CardHealthy, UUID: ptr.Deref(dev.Attributes[DRAAttributeUUID].StringValue, ""),
		Model: ptr.Deref(dev.Attributes[DRAAttributeModel].StringValue, "")}
	for _, t := range dev.Taints {
		switch t.Key {
		case n.DeviceTaintUnhealthy():
			c.State, c.Reason = CardUnhealthy, t.Value
		case n.DeviceTaintIsolated():
			if c.State == CardHealthy {
				c.State = CardIsolated
			}
		}
	}
	return c, true
}

func draShareCompare(a, b DRAShare) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Request, b.Request), cmp.Compare(a.Device, b.Device))
}
