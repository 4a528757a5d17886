package frag

import (
	"math"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The growth of frag when a pod is placed on a node: one pass over the
// node's cards (scan), then the cheapest exact computation for what it
// found: the closed forms on alike cards (closed.go), one pass over
// the classes on unlike cards (classGrowth), both states measured when the
// pod changes several cards (growthMeasured), the definition on nodes too
// large for the stack buffers.

// fragGrowth is frag after the pod minus frag before, in the node's units
// (negative when placing the pod makes the node less fragmented, e.g. a
// pod that exactly fills a card's unusable leftover). free is the policy's
// free slice after placement (Unusable, TakenWhole when negative).
func fragGrowth(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload, cpuOnly bool) float64 {
	return fragGrowthTotals(node, free, req, w, cpuOnly, nil)
}

// fragGrowthTotals is fragGrowth that also fills *tot, when not nil, with
// totalsOf(node, free, w), from the same pass over the cards.
func fragGrowthTotals(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload, cpuOnly bool, tot *nodeTotals) float64 {
	ix := index(w)
	if ix == nil || ix.weight == 0 {
		if tot != nil {
			*tot = totalsOf(node, free, w)
		}
		return 0
	}
	hb, ha, known := hostStates(node, req, cpuOnly)
	var hostB, hostA *allocator.HostResources
	if known {
		hostB, hostA = &hb, &ha
	}
	if len(node.Cards) > maxStackCards {
		if tot != nil {
			*tot = totalsOf(node, free, w)
		}
		return ix.growthByDefinition(node, free, hostB, hostA)
	}
	var s nodeScan
	s.scan(node, free, ix)
	if tot != nil {
		*tot = s.tot
	}
	if s.changed > 1 { // whole cards
		return ix.growthMeasured(node, free, &s.before, hostB, hostA)
	}
	return ix.oneCardGrowth(&s, hostB, hostA)
}

// hostStates is the node's free CPU and memory before and after req
// (known is false when the node's are unknown); with cpuOnly, memory
// counts as unlimited.
func hostStates(node *allocator.Node, req allocator.Request, cpuOnly bool) (before, after allocator.HostResources, known bool) {
	if node.HostFree == nil {
		return before, after, false
	}
	before = *node.HostFree
	hostAfter(node, req, &after)
	if cpuOnly {
		before.MemoryMiB, after.MemoryMiB = math.MaxInt64, math.MaxInt64
	}
	return before, after, true
}

// oneCardGrowth is the growth for a scan in which the pod changed at most
// one card.
func (ix *fragIndex) oneCardGrowth(s *nodeScan, hostB, hostA *allocator.HostResources) float64 {
	v := &s.before
	switch {
	case v.total == 0: // nothing free before, nor after
		return 0
	case v.alike:
		return ix.alikeGrowthHosts(v, hostB, hostA, s.changed == 1, s.f, s.u)
	}
	return ix.classGrowth(v, hostB, hostA, s.changed == 1, s.f, s.u, s.cp, s.bit)
}

// nodeScan is what one pass over a node's cards gives the frag policies:
// the before state's view, the cards the pod changed and the node totals.
type nodeScan struct {
	before nodeView
	// changed counts the cards whose free share the pod changed. When it
	// is 1, that card had f free, the pod took u, and the card has
	// capacity cp and model bit bit.
	changed   int
	f, u, cp  int64
	bit       uint64
	tot       nodeTotals
	lastModel modelMemo
}

// scan fills s from node and free, the policy's free slice after the pod.
// decide marks every card that is not schedulable Unusable, so only those
// need their state looked at.
func (s *nodeScan) scan(node *allocator.Node, free []int64, ix *fragIndex) {
	s.lastModel.ix = ix
	for i := range node.Cards {
		c := &node.Cards[i]
		if free[i] == allocator.Unusable && !c.Schedulable() {
			continue
		}
		before, after := c.Free(), free[i]
		switch {
		case after == allocator.Unusable:
			after = before
		case after < 0:
			after = 0
		}
		if before == 0 && after == 0 {
			s.tot.add(c.Capacity, 0, 0, 0)
			continue
		}
		bit, pressure := s.lastModel.lookup(c.Model)
		s.tot.add(c.Capacity, before, after, pressure)
		if after != before {
			s.changed++
			s.f, s.u, s.cp, s.bit = before, before-after, c.Capacity, bit
		}
		if before > 0 {
			s.before.add(before, c.Capacity, bit)
		}
	}
}

// modelMemo remembers the last model looked up in the index: a node's
// cards are mostly of one model.
type modelMemo struct {
	ix       *fragIndex
	model    string
	bit      uint64
	pressure float64
	ok       bool
}

// lookup is model's bit in ix.models and its pressure (0 for a model no
// shape names, or without ModelCapacity).
func (m *modelMemo) lookup(model string) (bit uint64, pressure float64) {
	if m.ok && model == m.model {
		return m.bit, m.pressure
	}
	bit, pos, known := m.ix.modelBit(model)
	pressure = 0
	if known && pos < len(m.ix.pressure) {
		pressure = m.ix.pressure[pos]
	}
	m.model, m.bit, m.pressure, m.ok = model, bit, pressure, true
	return bit, pressure
}

// classGrowth is frag after minus frag before when at most one card changes
// (u units taken from a card with free f, capacity cp and model bit b; none
// when !took) and the node's free CPU and memory go from hostB to hostA,
// class by class on view v of the before state (any cards). Per class it
// takes the before state's class stats, the host fit weights before and
// after, and X, what the class loses: T when the node cannot host it, else
// lost (see takeGrowth for how the taken card moves it).
func (ix *fragIndex) classGrowth(v *nodeView, hostB, hostA *allocator.HostResources, took bool, f, u, cp int64, b uint64) float64 {
	allB := hostB == nil || hostB.Fits(ix.maxHost)
	allA := hostA == nil || hostA.Fits(ix.maxHost)
	t := float64(v.total)
	ta := t - float64(u)
	g := ix.noGPU * (ta - t)
	for ci := range ix.classes {
		c := &ix.classes[ci]
		n, lostU := v.classFit(c)
		if n < c.count {
			// The node cannot host the class before, nor after: it
			// loses T, then T − u, whatever fits the host.
			g += c.weight * (ta - t)
			continue
		}
		fb, fa := c.weight, c.weight
		switch {
		case allA && allB:
		case allB:
			fa = c.hostFitWeight(hostA)
		default:
			fb, fa = c.hostFitWeights(hostB, hostA)
		}
		x := float64(lostU)
		xa := x
		if took {
			need := c.units
			if need == 0 {
				need = cp
			}
			switch {
			case !c.anyModel && c.mask&b == 0, f < need:
				xa = x - float64(u)
			case f-u >= need:
			case n-1 >= c.count:
				xa = x + float64(f-u)
			default:
				xa = ta
			}
		}
		g += (c.weight-fa)*ta + fa*xa - (c.weight-fb)*t - fb*x
	}
	return g
}

// growthMeasured is frag after minus frag before for a pod that changes
// several cards (whole cards): both states are measured. vb is the before
// state's view.
func (ix *fragIndex) growthMeasured(node *allocator.Node, free []int64, vb *nodeView, hostB, hostA *allocator.HostResources) float64 {
	var s fragScratch
	n := len(node.Cards)
	vec, bits := s.vec[:n], s.bits[:n]
	ix.modelBits(node, bits)
	fitA, fitB := s.fits(ix)
	ix.fitWeights(hostB, fitB)
	ix.fitWeights(hostA, fitA)
	afterFree(node, free, vec)
	s.viewA.load(node, vec, bits)
	return ix.measureView(&s.viewA, fitA) - ix.measureView(vb, fitB)
}

// growthByDefinition is the growth from the definition, for nodes of more
// than maxStackCards cards.
func (ix *fragIndex) growthByDefinition(node *allocator.Node, free []int64, hostB, hostA *allocator.HostResources) float64 {
	vec, bits := make([]int64, len(node.Cards)), make([]uint64, len(node.Cards))
	ix.modelBits(node, bits)
	afterFree(node, free, vec)
	after := ix.measure(node, vec, bits, hostA)
	beforeFree(node, vec)
	return after - ix.measure(node, vec, bits, hostB)
}
