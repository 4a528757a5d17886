package frag

import (
	"math/bits"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The measure on a node's view, class by class: what measure computes, on
// the cards that have free units gathered once with their model bits.
// growth.go and closed.go build on it.

// maxFastClasses is how many workload classes the view computations handle
// with stack buffers; larger workloads use heap buffers.
const maxFastClasses = 64

// nodeView is one node state reduced to what the measure reads: the free
// share, capacity and model bit of the cards that have any free, in card
// order, and whether those cards are all alike (same model bit and
// capacity), which allows the closed forms of closed.go.
type nodeView struct {
	k     int
	total int64
	free  [maxStackCards]int64
	cap   [maxStackCards]int64
	bits  [maxStackCards]uint64
	// alike: every card in the view has model bit bit and capacity cap0.
	alike bool
	bit   uint64
	cap0  int64
	// unused counts the cards entirely free (free ≥ capacity).
	unused int
}

// load fills the view from free (card i has free[i], ≤ 0: nothing).
// It reports false when the node has more cards than the view holds.
func (v *nodeView) load(node *allocator.Node, free []int64, bits []uint64) bool {
	if len(free) > maxStackCards {
		return false
	}
	*v = nodeView{alike: true}
	for i, f := range free {
		if f > 0 {
			v.add(f, node.Cards[i].Capacity, bits[i])
		}
	}
	return true
}

// add adds a card with free f > 0, capacity c and model bit bit. A view
// starts as the zero nodeView (or as load leaves it).
func (v *nodeView) add(f, c int64, bit uint64) {
	if v.k == 0 {
		v.alike, v.bit, v.cap0 = true, bit, c
	} else if bit != v.bit || c != v.cap0 {
		v.alike = false
	}
	v.free[v.k], v.cap[v.k], v.bits[v.k] = f, c, bit
	v.k++
	v.total += f
	if f >= c {
		v.unused++
	}
}

// slot is the model slot of an alike view's cards in the index's
// cumulative tables: the model's position in ix.models, or len(ix.models)
// for a model no shape names.
func (v *nodeView) slot(ix *fragIndex) int {
	if v.bit == 0 {
		return len(ix.models)
	}
	return bits.TrailingZeros64(v.bit)
}

// classFit is, for class c, how many cards of the view can take c's
// per-card demand and the free share of the others.
func (v *nodeView) classFit(c *fragClass) (n int, lost int64) {
	for i := 0; i < v.k; i++ {
		f := v.free[i]
		if !c.anyModel && c.mask&v.bits[i] == 0 {
			lost += f
			continue
		}
		need := c.units
		if need == 0 {
			need = v.cap[i]
		}
		if f >= need {
			n++
		} else {
			lost += f
		}
	}
	return n, lost
}

// classStat is, for one class on one node state, how many cards can take
// the class's per-card demand (n) and the free share of the others (lost).
type classStat struct {
	n    int
	lost int64
}

// classStats fills st with every class's classStat on view v.
func (ix *fragIndex) classStats(v *nodeView, st []classStat) {
	for ci := range ix.classes {
		st[ci].n, st[ci].lost = v.classFit(&ix.classes[ci])
	}
}

// fitWeights fills fit[c] with the part of class c's weight whose CPU and
// memory fit in host.
func (ix *fragIndex) fitWeights(host *allocator.HostResources, fit []float64) {
	if host == nil || host.Fits(ix.maxHost) {
		copy(fit, ix.weights)
		return
	}
	for i := range ix.classes {
		fit[i] = ix.classes[i].hostFitWeight(host)
	}
}

// measureView is measure on a view; fit comes from fitWeights for the
// view's host state.
func (ix *fragIndex) measureView(v *nodeView, fit []float64) float64 {
	if v.total == 0 {
		return 0
	}
	var stBuf [maxFastClasses]classStat
	st := stBuf[:0]
	if len(ix.classes) > len(stBuf) {
		st = make([]classStat, len(ix.classes))
	}
	st = st[:len(ix.classes)]
	ix.classStats(v, st)
	t := float64(v.total)
	frag := ix.noGPU * t
	for ci := range ix.classes {
		c := &ix.classes[ci]
		fw := fit[ci]
		if fw < c.weight {
			frag += (c.weight - fw) * t
		}
		if fw <= 0 {
			continue
		}
		if st[ci].n < c.count {
			frag += fw * t
		} else {
			frag += fw * float64(st[ci].lost)
		}
	}
	return frag
}

// takeGrowth is how much frag grows when u units are taken from a card
// with free f, capacity cp and model bit b, given the node's class stats
// st and host-fit weights fit; it leaves out the part every candidate card
// shares (the shapes that the host blocks or that ask for no GPU lose u
// wherever it is taken). Per class, with T the node's free total:
//   - the node could not host the class (n < count): its frag, T, drops by u;
//   - the card was already lost to the class (model excluded or f < need):
//     lost drops by u;
//   - the card stays usable (f − u ≥ need): nothing changes;
//   - the card becomes lost: lost grows by f − u, or, if that leaves too few
//     usable cards, the class's frag jumps from lost to T − u.
func (ix *fragIndex) takeGrowth(v *nodeView, st []classStat, fit []float64, f, u, cp int64, b uint64) float64 {
	t := float64(v.total)
	var g float64
	for ci := range ix.classes {
		fw := fit[ci]
		if fw <= 0 {
			continue
		}
		c := &ix.classes[ci]
		n := st[ci].n
		need := c.units
		if need == 0 {
			need = cp
		}
		switch {
		case n < c.count, !c.anyModel && c.mask&b == 0, f < need:
			g -= fw * float64(u)
		case f-u >= need:
		case n-1 >= c.count:
			g += fw * float64(f-u)
		default:
			g += fw * (t - float64(u) - float64(st[ci].lost))
		}
	}
	return g
}

// fragScratch holds buffers on the stack for nodes of up to maxStackCards
// cards and workloads of up to maxFastClasses classes.
type fragScratch struct {
	vec          [maxStackCards]int64
	bits         [maxStackCards]uint64
	fitA, fitB   [maxFastClasses]float64
	st           [maxFastClasses]classStat
	viewA, viewB nodeView
}

// fits returns two fit-weight buffers of one entry per class.
func (s *fragScratch) fits(ix *fragIndex) (a, b []float64) {
	if n := len(ix.classes); n > maxFastClasses {
		return make([]float64, n), make([]float64, n)
	}
	return s.fitA[:len(ix.classes)], s.fitB[:len(ix.classes)]
}

// stats returns a class-stat buffer of one entry per class.
func (s *fragScratch) stats(ix *fragIndex) []classStat {
	if n := len(ix.classes); n > maxFastClasses {
		return make([]classStat, n)
	}
	return s.st[:len(ix.classes)]
}
