package cache

import (
	"cmp"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// shapeKey is one demand shape: units on one card or a number of whole
// cards (both 0: no GPU) and the CPU and memory that come with them.
type shapeKey struct {
	units      int64
	wholeCards int
	host       allocator.HostResources
}

// learn counts a pod's demand once per pod UID: a pod that asks for no GPU
// is one shape of 0 units with its CPU and memory; a GPU pod is one shape
// per requesting container (units, or whole cards), the pod's CPU and memory split evenly between
// them (exact for the common one-container pod).
func (c *Cache) learn(uid types.UID, req api.PodRequest, host allocator.HostResources) {
	if _, ok := c.seen[uid]; ok {
		return
	}
	c.seen[uid] = struct{}{}
	if req.Empty() {
		c.shapes[shapeKey{host: host}]++
	} else {
		k := int64(len(req.Containers) + len(req.WholeCards))
		share := allocator.HostResources{CPUMilli: host.CPUMilli / k, MemoryMiB: host.MemoryMiB / k}
		for _, ct := range req.Containers {
			c.shapes[shapeKey{units: ct.Units, host: share}]++
		}
		for _, ct := range req.WholeCards {
			c.shapes[shapeKey{wholeCards: ct.Cards, host: share}]++
		}
	}
	c.workloadDirt = true
}

// setModels replaces node n's contribution to the per-model capacity.
func (c *Cache) setModels(n *nodeState, models map[string]allocator.ModelCapacity) {
	for m, mc := range n.models {
		t := c.modelCap[m]
		t.Cards -= mc.Cards
		t.Units -= mc.Units
		if t.Cards <= 0 {
			delete(c.modelCap, m)
		} else {
			c.modelCap[m] = t
		}
	}
	for m, mc := range models {
		t := c.modelCap[m]
		t.Cards += mc.Cards
		t.Units += mc.Units
		c.modelCap[m] = t
	}
	if len(n.models) > 0 || len(models) > 0 {
		c.workloadDirt = true
	}
	n.models = models
}

func modelsOf(inv api.Inventory) map[string]allocator.ModelCapacity {
	out := map[string]allocator.ModelCapacity{}
	for _, card := range inv.Cards {
		allocator.AddCard(out, card.Model, card.Units)
	}
	return out
}

// Workload returns the histogram of the demands of every pod the cache has
// seen (see learn; one shape per distinct demand, weighted by how often it
// was seen) and the cluster's per-model card capacity. The value is shared
// and must not be changed.
func (c *Cache) Workload() *allocator.Workload {
	c.mu.RLock()
	w, dirty := c.workload, c.workloadDirt
	c.mu.RUnlock()
	if !dirty && w != nil {
		return w
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.workloadDirt || c.workload == nil {
		// A fresh value each time: the one handed out before is never
		// changed, so policies may read it without the lock.
		w := &allocator.Workload{Shapes: make([]allocator.Shape, 0, len(c.shapes)), ModelCapacity: maps.Clone(c.modelCap)}
		for k, n := range c.shapes {
			w.Shapes = append(w.Shapes, allocator.Shape{Units: k.units, WholeCards: k.wholeCards, Host: k.host, Weight: n})
		}
		slices.SortFunc(w.Shapes, func(x, y allocator.Shape) int {
			return cmp.Or(cmp.Compare(x.WholeCards, y.WholeCards), cmp.Compare(x.Units, y.Units),
				cmp.Compare(x.Host.CPUMilli, y.Host.CPUMilli), cmp.Compare(x.Host.MemoryMiB, y.Host.MemoryMiB))
		})
		if c.workload.Near(w, allocator.WorkloadTolerance) {
			// Nothing that counts changed (a node update, a pod seen again),
			// or the shapes' shares moved less than the tolerance since the
			// value handed out (a burst of pods of known shapes): the same
			// value, so the extender's memo, keyed by it, holds.
			w = c.workload
		}
		c.workload, c.workloadDirt = w, false
	}
	return c.workload
}
