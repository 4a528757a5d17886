// Package allocatortest builds allocator inputs for tests: random cases
// that the property tests of the allocator, its policies and their
// registry share.
package allocatortest

import (
	"math/rand"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// RandomCase is a random workload (shares, whole cards, CPU-only pods,
// model constraints, CPU and memory requests), node of 1 to maxCards cards
// (mixed models and capacities, unhealthy cards, CPU and memory free or
// unknown) and pod, drawn from rng: the same rng state gives the same case.
// It exercises every path of the policies' card choice and score, the
// fragmentation-aware ones' most of all.
func RandomCase(rng *rand.Rand, maxCards int) (*allocator.Workload, *allocator.Node, allocator.Request) {
	w := &allocator.Workload{}
	models := []string{"A", "B", "C"}
	for k := 0; k < 1+rng.Intn(30); k++ {
		s := allocator.Shape{Host: allocator.HostResources{CPUMilli: int64(rng.Intn(16)) * 1000, MemoryMiB: int64(rng.Intn(16)) * 1024}}
		switch rng.Intn(5) {
		case 0:
			s.WholeCards = 1 + rng.Intn(4)
		case 1: // no GPU
		default:
			s.Units = int64(1+rng.Intn(20)) * 50
		}
		if rng.Intn(4) == 0 {
			s.Models = []string{models[rng.Intn(3)]}
			if rng.Intn(3) == 0 {
				s.Models = append(s.Models, models[rng.Intn(3)])
			}
		}
		s.Weight = float64(1 + rng.Intn(50))
		w.Observe(s)
	}
	if rng.Intn(2) == 0 {
		w.ModelCapacity = map[string]allocator.ModelCapacity{}
		for _, m := range models[:1+rng.Intn(3)] {
			n := 1 + rng.Intn(100)
			w.ModelCapacity[m] = allocator.ModelCapacity{Cards: n, Units: int64(n) * 1000}
		}
		w.Reindex()
	}
	node := &allocator.Node{Name: "n"}
	switch rng.Intn(7) {
	case 0: // unknown
	case 1: // blocks no shape
		node.HostFree = &allocator.HostResources{CPUMilli: 1 << 20, MemoryMiB: 1 << 30}
	case 2: // only CPU may block
		node.HostFree = &allocator.HostResources{CPUMilli: int64(rng.Intn(24)) * 1000, MemoryMiB: 1 << 30}
	case 3: // only memory may block
		node.HostFree = &allocator.HostResources{CPUMilli: 1 << 20, MemoryMiB: int64(rng.Intn(24)) * 1024}
	default:
		node.HostFree = &allocator.HostResources{CPUMilli: int64(rng.Intn(24)) * 1000, MemoryMiB: int64(rng.Intn(24)) * 1024}
	}
	mixed := rng.Intn(3) == 0
	for i := 0; i < 1+rng.Intn(maxCards); i++ {
		c := allocator.Card{Index: i, Model: "A", Capacity: 1000, State: api.CardHealthy}
		if mixed {
			c.Model = models[rng.Intn(3)]
			if rng.Intn(3) == 0 {
				c.Capacity = 2000
			}
		}
		switch rng.Intn(4) {
		case 0:
		case 1:
			c.Used, c.Whole = c.Capacity, true
		default:
			c.Used = int64(rng.Intn(21)) * 50
		}
		if rng.Intn(12) == 0 {
			c.State = api.CardUnhealthy
		}
		node.Cards = append(node.Cards, c)
	}
	req := allocator.Request{Host: allocator.HostResources{CPUMilli: int64(rng.Intn(8)) * 1000, MemoryMiB: int64(rng.Intn(8)) * 1024}}
	switch rng.Intn(4) {
	case 0: // CPU-only
	case 1:
		req.Demands = []allocator.Demand{{Container: "c", WholeCards: 1 + rng.Intn(3)}}
	default:
		req.Demands = []allocator.Demand{{Container: "c", Units: int64(1+rng.Intn(20)) * 50}}
	}
	if rng.Intn(5) == 0 {
		req.Models = []string{models[rng.Intn(3)]}
	}
	return w, node, req
}
