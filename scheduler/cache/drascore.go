package cache

import (
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The DRA prioritize verb's view (server.DRA): a pod's demand through its
// claims, and the DRA nodes' cards as the allocated claims use them, both
// in GiB, the node agent's default unit.

// draScoreUnit is the unit the DRA view counts memory in.
const draScoreUnit = api.UnitGiB

// draScore keeps the nodes read from the informers until they change.
type draScore struct {
	generation atomic.Int64 // bumped by every informer event
	mu         sync.Mutex
	built      int64 // the generation nodes were built at (0: never)
	nodes      map[string]*allocator.Node
}

func (s *draScore) changes() toolscache.ResourceEventHandler {
	bump := func() { s.generation.Add(1) }
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { bump() },
		UpdateFunc: func(any, any) { bump() },
		DeleteFunc: func(any) { bump() },
	}
}

// Nodes are the named nodes' cards as the gpushare DRA driver publishes
// them, each card's used memory the claims allocated on it (DRANodes); nil
// for a node without a slice, and for every node until the informers have
// synced. The nodes are rebuilt only after an informer event.
func (d *DRA) Nodes(names []string) []*allocator.Node {
	out := make([]*allocator.Node, len(names))
	nodes := d.scoreNodes()
	for i, n := range names {
		out[i] = nodes[n]
	}
	return out
}

func (d *DRA) scoreNodes() map[string]*allocator.Node {
	s := &d.score
	gen := s.generation.Load() + 1 // 0 stays "never built"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.built == gen {
		return s.nodes
	}
	usage, err := d.Usage()
	if err != nil {
		return nil
	}
	s.nodes, s.built = DRANodes(usage, draScoreUnit), gen
	return s.nodes
}

// DRANodes turns what the DRA driver holds (api.Names.DRAUsage) into
// allocator nodes in unit: a card's capacity is the memory its slice
// offers, rounded down, and its use the claims' memory on it, rounded up.
// Only nodes with a slice are kept. It is a pure function.
func DRANodes(usage map[string]*api.DRANode, unit api.MemoryUnit) map[string]*allocator.Node {
	out := make(map[string]*allocator.Node, len(usage))
	for name, d := range usage {
		if !d.Sliced {
			continue
		}
		n := &allocator.Node{Name: name, Unit: unit}
		for _, c := range d.Cards {
			card := allocator.Card{Index: c.Index, UUID: c.UUID, Model: c.Model, State: c.State,
				Capacity: api.ConvertUnitsDown(c.Offered, d.Unit, unit)}
			for _, sh := range c.Claims {
				card.Used += sh.Units(unit)
			}
			n.Cards = append(n.Cards, card)
		}
		n.Summarize()
		out[name] = n
	}
	return out
}

// Request is the pod's demand through its claims that are not allocated
// yet: one share of one card per device a request of the driver's
// DeviceClass (named after the driver, as the chart's) asks for, of the
// memory it asks (the request policy's default, one unit, when it asks
// none). false when the pod asks for no such device; an error when one of
// its claims is not known yet. Requests of other classes, "All" requests
// and prioritized lists (firstAvailable) are not scored.
func (d *DRA) Request(pod *corev1.Pod) (allocator.Request, bool, error) {
	var req allocator.Request
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return req, false, err
		}
		if name == nil {
			continue
		}
		obj, ok, err := d.claims.GetIndexer().GetByKey(pod.Namespace + "/" + *name)
		if err != nil || !ok {
			return req, false, fmt.Errorf("ResourceClaim %s/%s is not known yet", pod.Namespace, *name)
		}
		req.Demands = append(req.Demands, ClaimDemands(obj.(*resourceapi.ResourceClaim), d.names.DRADriver(), draScoreUnit)...)
	}
	return req, len(req.Demands) > 0, nil
}

// ClaimDemands are the shares an unallocated claim asks of class's devices,
// in unit (see Request). It is a pure function.
func ClaimDemands(claim *resourceapi.ResourceClaim, class string, unit api.MemoryUnit) []allocator.Demand {
	if claim.Status.Allocation != nil {
		return nil
	}
	var out []allocator.Demand
	for _, r := range claim.Spec.Devices.Requests {
		e := r.Exactly
		if e == nil || e.DeviceClassName != class || e.AllocationMode == resourceapi.DeviceAllocationModeAll {
			continue
		}
		units := api.DRARequestUnits(e.Capacity, unit)
		count := max(e.Count, 1)
		for range count {
			out = append(out, allocator.Demand{Container: claim.Name + "/" + r.Name, Units: units})
		}
	}
	return out
}
