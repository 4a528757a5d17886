package allocator

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Workload is the distribution of demands seen so far, learned online from
// the pods the scheduler has already handled; policies that care about
// fragmentation weigh free space by it. A nil or empty Workload is allowed.
// Build it with Observe. Policies keep what they precompute from it with it
// (Derived). A Workload must not be copied once in use.
type Workload struct {
	Shapes []Shape
	// ModelCapacity, optional, is the cluster's schedulable GPU capacity
	// per card model: what the scheduler knows of its own cluster (the
	// extender from its cache, the simulator from the trace's nodes), not
	// of future pods. Policies that weigh how scarce a model is for the pods
	// that insist on it (frag) read it; nil disables that. Call Reindex
	// after changing it.
	ModelCapacity map[string]ModelCapacity
	// derived is what policies precomputed from Shapes and ModelCapacity.
	derived derivedValues
}

// ModelCapacity is how many cards of one model a cluster has and their
// total capacity in the nodes' unit.
type ModelCapacity struct {
	Cards int
	Units int64
}

// AddCard counts one card of model with units into capacity (per card model).
func AddCard(capacity map[string]ModelCapacity, model string, units int64) {
	mc := capacity[model]
	mc.Cards++
	mc.Units += units
	capacity[model] = mc
}

// Shape is one kind of demand and how often it was seen. A shape with
// Units == 0 and WholeCards == 0 is a pod that asks for no GPU.
type Shape struct {
	Units      int64
	WholeCards int
	Models     []string
	Weight     float64
	// Host is the shape's CPU and memory request (zero when unknown).
	Host HostResources
}

// Observe records one more pod of shape s: its weight is added to an equal
// shape already recorded (same Units, WholeCards, Models and Host), or s is
// appended. A zero s.Weight counts as 1. Observe drops what policies
// precomputed from the shapes (Reindex), so it must not run while another
// goroutine evaluates a policy with w: callers update a
// workload between decisions (the simulator after each arrival, the
// extender's cache under its lock) and hand policies a settled value.
//
// This is how a policy learns the workload online, from pods it has seen.
func (w *Workload) Observe(s Shape) {
	s.Weight = cmp.Or(s.Weight, 1)
	for i := range w.Shapes {
		if sameShape(w.Shapes[i], s) {
			w.Shapes[i].Weight += s.Weight
			w.Reindex()
			return
		}
	}
	s.Models = slices.Clone(s.Models)
	w.Shapes = append(w.Shapes, s)
	w.Reindex()
}

// Reindex drops what policies precomputed from Shapes and ModelCapacity
// (Derived): they compute it again, from the values as they are now, on
// their next use. Call it after changing Shapes or ModelCapacity directly;
// Observe calls it. Like Observe, it must not run while another goroutine
// evaluates a policy with w.
func (w *Workload) Reindex() { w.derived.values.Store(nil) }

// Derived returns build(w) for key: built on the first call for that key
// and kept with w until Observe or Reindex, so that a policy that
// precomputes tables from the workload (the fragmentation-aware policies'
// index) builds them once per workload value, not once per node. key
// names what is built, as a context.Value key does: a comparable value of a
// type of the caller's own package. build reads w's Shapes and
// ModelCapacity and does not call Derived. Calls may run concurrently (the
// first builds, the others wait for it and share the result); not with
// Observe or Reindex.
//
// A value found costs one atomic load and a key comparison: policies call
// it for every node they evaluate.
func (w *Workload) Derived(key any, build func(*Workload) any) any {
	if v, ok := w.derived.lookup(key); ok {
		return v
	}
	w.derived.mu.Lock()
	defer w.derived.mu.Unlock()
	if v, ok := w.derived.lookup(key); ok {
		return v
	}
	v := build(w)
	var next []derivedValue
	if old := w.derived.values.Load(); old != nil {
		next = slices.Clone(*old)
	}
	next = append(next, derivedValue{key: key, value: v})
	w.derived.values.Store(&next)
	return v
}

// derivedValues is what policies derived from a workload (Derived): read
// with one atomic load, written under mu, replaced whole.
type derivedValues struct {
	mu     sync.Mutex
	values atomic.Pointer[[]derivedValue]
}

type derivedValue struct{ key, value any }

// lookup is the value derived for key, if any.
func (d *derivedValues) lookup(key any) (any, bool) {
	if p := d.values.Load(); p != nil {
		for _, e := range *p {
			if e.key == key {
				return e.value, true
			}
		}
	}
	return nil, false
}

func sameShape(a, b Shape) bool {
	return a.Units == b.Units && a.WholeCards == b.WholeCards && a.Host == b.Host && slices.Equal(a.Models, b.Models)
}

// WorkloadTolerance is how far the extender lets the workload its policies
// read lag the pods it has seen (Near): each shape's share of the pods may
// be off by up to this much, as a fraction of all pods (0.01: one pod in a
// hundred), before a new value is handed out. A new shape or a change of
// model capacity always gives a new value. gpushare-simulate replays with
// the same rule (-workload-tolerance); docs/design.md, "The workload a
// policy reads", has what it costs in packing.
const WorkloadTolerance = 0.01

// Near reports whether w and o hold the same shapes in the same order
// (weights aside) and the same model capacity, and each shape's share of
// the total weight differs by at most tol between them. Policies read
// weights only as shares, so Near workloads with tol 0 decide alike (up to
// rounding).
func (w *Workload) Near(o *Workload, tol float64) bool {
	if w == nil || o == nil {
		return w == o
	}
	if len(w.Shapes) != len(o.Shapes) || !maps.Equal(w.ModelCapacity, o.ModelCapacity) {
		return false
	}
	var tw, to float64
	for i, a := range w.Shapes {
		if !sameShape(a, o.Shapes[i]) {
			return false
		}
		tw += max(a.Weight, 0)
		to += max(o.Shapes[i].Weight, 0)
	}
	share := func(x, total float64) float64 {
		if total <= 0 {
			return 0
		}
		return max(x, 0) / total
	}
	for i, a := range w.Shapes {
		if math.Abs(share(a.Weight, tw)-share(o.Shapes[i].Weight, to)) > tol {
			return false
		}
	}
	return true
}
