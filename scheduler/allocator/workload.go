package allocator

import (
	"maps"
	"math"
	"slices"
)

// Observe records one more pod of shape s: its weight is added to an equal
// shape already recorded (same Units, WholeCards, Models and Host), or s is
// appended. A zero s.Weight counts as 1. Observe keeps the precomputed index
// that fragmentation-aware policies read up to date, so it must not run
// while another goroutine evaluates a policy with w: callers update a
// workload between decisions (the simulator after each arrival, the
// extender's cache under its lock) and hand policies a settled value.
//
// This is how a policy learns the workload online, from pods it has seen.
func (w *Workload) Observe(s Shape) {
	if s.Weight == 0 {
		s.Weight = 1
	}
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

// Reindex rebuilds the precomputed index from Shapes. Call it after changing
// Shapes directly; policies given a workload whose index is missing or stale
// build a temporary one on every call (correct, but slower and allocating).
func (w *Workload) Reindex() {
	w.idx = buildFragIndex(w.Shapes, w.ModelCapacity)
}

func sameShape(a, b Shape) bool {
	return a.Units == b.Units && a.WholeCards == b.WholeCards && a.Host == b.Host && slices.Equal(a.Models, b.Models)
}

// fragIndex is a workload's shapes arranged for the fragmentation measure:
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
