package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpushare/gpushare/api"
)

// Whoever may write resourceclaims/status can write any allocation: the
// scheduler's allocator is not the only writer. Before a claim is prepared,
// CheckAllocation holds its allocation to what this node published and what
// the claim asked for, so that a forged allocation gets no card and no
// memory.

// Share is the memory one claim holds on one card of this node, in bytes.
type Share map[int]int64

// CheckAllocation checks the results of driver's devices in claim's
// allocation, a pure function:
//   - each names this node's pool (pool) and a device the node publishes
//     (published: the slice's devices now, Devices);
//   - each names a request of the claim (or a subrequest of one);
//   - each consumes memory (a shareable card is never allocated without
//     it), in whole units of unit, exactly what its request asked for
//     (capacity.requests.memory rounded up to a unit; one unit when it asks
//     for none), as the device's request policy makes the allocator do;
//   - on each card, what the claim consumes plus what the node's other
//     prepared claims hold there (others) is within the capacity published.
//
// It returns the claim's share per card index, or an error that says what
// is wrong and what to do.
func CheckAllocation(claim *resourceapi.ResourceClaim, driver, pool string, unit api.MemoryUnit, published []resourceapi.Device, others Share) (Share, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	devices := map[string]resourceapi.Device{}
	for _, d := range published {
		devices[d.Name] = d
	}
	share := Share{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver {
			continue
		}
		_, ok := devices[r.Device]
		index, isCard := CardIndex(r.Device)
		if r.Pool != pool || !ok || !isCard {
			return nil, errNotOurs(r.Pool, r.Device)
		}
		want, ok := requested(claim, r.Request)
		if !ok {
			return nil, forged(claim, r, "names request %q, which the claim does not have", r.Request)
		}
		got, named := api.DRAConsumedMemory(r, devices[r.Device].Capacity[CapacityMemory].Value)
		if !named {
			return nil, forged(claim, r, "consumes no %s of a card that claims share", CapacityMemory)
		}
		if w := api.DRAQuantity(api.DRARequestUnits(want, unit), unit); got.Cmp(w) != 0 {
			return nil, forged(claim, r, "consumes %s of %s where its request asks for %s", got.String(), CapacityMemory, w.String())
		}
		share[index] += got.Value()
	}
	for index, bytes := range share {
		limit := devices[api.DRADeviceName(index)].Capacity[CapacityMemory].Value
		if total := bytes + others[index]; total > limit.Value() {
			return nil, fmt.Errorf("claim %s/%s is allocated %s on device %s/%s, where the node's prepared claims already hold %s of the %s it offers: more than the card has; delete the pod so that it is scheduled again",
				claim.Namespace, claim.Name, resource.NewQuantity(bytes, resource.BinarySI), pool, api.DRADeviceName(index), resource.NewQuantity(others[index], resource.BinarySI), limit.String())
		}
	}
	return share, nil
}

// requested is the capacity the claim's request (or subrequest,
// "req/sub") of that name asks for (nil: none, the policy's default of one
// unit); false when the claim has no such request.
func requested(claim *resourceapi.ResourceClaim, name string) (*resourceapi.CapacityRequirements, bool) {
	base := resourceclaim.BaseRequestRef(name)
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != base {
			continue
		}
		if base == name && r.Exactly != nil {
			return r.Exactly.Capacity, true
		}
		for _, s := range r.FirstAvailable {
			if r.Name+"/"+s.Name == name {
				return s.Capacity, true
			}
		}
	}
	return nil, false
}

func forged(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, format string, args ...any) error {
	return fmt.Errorf("claim %s/%s: its allocation of device %s/%s %s: not an allocation the scheduler makes from this node's ResourceSlice, so it is not prepared; delete the claim's allocation (or the pod) so that the scheduler allocates it again",
		claim.Namespace, claim.Name, r.Pool, r.Device, fmt.Sprintf(format, args...))
}

// prepared are the shares of the claims this driver prepared (in memory:
// after a restart of the node agent, the claims prepared before are not
// counted against the capacity until they are prepared again).
type prepared map[types.UID]Share

// others is the sum of the shares of the prepared claims but claim.
func (p prepared) others(claim types.UID) Share {
	out := Share{}
	for uid, s := range p {
		if uid == claim {
			continue
		}
		for i, b := range s {
			out[i] += b
		}
	}
	return out
}
