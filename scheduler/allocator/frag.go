package allocator

import (
	"math"
	"math/bits"
	"slices"
)

// Fragmentation-aware policies (see docs/packing.md).
//
// The measure is FGD's (Weng et al., "Beware of Fragmentation", USENIX ATC
// 2023): for a node and a target workload (the shapes of the pods seen so
// far, weighted by how often each was seen), the node's fragmentation is the
// expected number of free GPU units that a random pod of the workload could
// not use:
//
//	frag(node) = Σ_shapes share(s) · unusable(node, s)
//
// where unusable(node, s) is
//   - all the node's free units when s asks for no GPU, when the node lacks
//     the CPU or memory s asks for, or when fewer than s's card count of its
//     cards can take s's per-card demand;
//   - otherwise the free units of the cards s cannot use: cards of a model s
//     excludes and cards with less free than s's per-card demand (for a
//     whole-card demand: cards already partly used).
//
// FGD places a pod where frag grows least (its "gradient descent"); the
// fgd policy does that. The workload is learned online (Workload.Observe):
// nothing reads ahead.
//
// The frag policy places a share on the best-fit card of a node (on the
// openb traces it packs as well as FGD's least-fragmentation card, for a
// third less work) and adds three terms to FGD's node score, all in cards
// (see NewFragPolicy and docs/packing.md for the measurements behind them):
//   - stranded GPU (strandGrowth): FGD looks one pod ahead, so a CPU-only or
//     CPU-heavy pod that leaves a node's free cards without the CPU or
//     memory to feed them costs nothing until a single pod no longer fits.
//     The strand term looks at the node filled with the workload's average
//     GPU pod and charges the GPU its CPU and memory cannot feed;
//   - model scarcity (scarcityCost): a pod that may run on several models
//     pays for taking capacity of a model that the pods insisting on it will
//     need (needs Workload.ModelCapacity, the cluster's cards per model);
//   - binpack (allocatedShare), with a small weight: among nodes that the
//     other terms rate alike, the fuller one, keeping empty nodes for
//     8-card pods.
//
// Worked example (one node, two cards of 1,000 units each with 300 and
// 1,000 free, plenty of CPU; workload: half the pods ask for 500 units,
// half for one whole card): for the 500 shape the card with 300 free is
// unusable (300); for the whole-card shape the partly used card is unusable
// (300) and the other one fits: frag = 0.5·300 + 0.5·300 = 300.

// maxStackCards is how many cards the measure handles without allocating.
const maxStackCards = 16

// fragMeasure computes frag for one node state. free[i] is what card i has
// free in that state (0 or negative: nothing), host the node's free CPU and
// memory in that state (nil: unknown, never blocking), bits[i] the model bit
// of card i in ix.models (0 when no shape names its model).
func (ix *fragIndex) measure(node *Node, free []int64, bits []uint64, host *HostResources) float64 {
	var total int64
	for _, f := range free {
		if f > 0 {
			total += f
		}
	}
	if total == 0 {
		return 0
	}
	t := float64(total)
	frag := ix.noGPU * t
	for ci := range ix.classes {
		c := &ix.classes[ci]
		fit := c.hostFitWeight(host)
		if fit < c.weight {
			frag += (c.weight - fit) * t
		}
		if fit <= 0 {
			continue
		}
		n := 0
		var lost int64
		for i, f := range free {
			if f <= 0 {
				continue
			}
			if !c.anyModel && c.mask&bits[i] == 0 {
				lost += f
				continue
			}
			need := c.units
			if need == 0 {
				need = node.Cards[i].Capacity
			}
			if f >= need {
				n++
			} else {
				lost += f
			}
		}
		if n < c.count {
			frag += fit * t
		} else {
			frag += fit * float64(lost)
		}
	}
	return frag
}

// modelBit is model's bit and position in ix.models (0 and −1 when no
// shape names it).
func (ix *fragIndex) modelBit(model string) (uint64, int) {
	for k, m := range ix.models {
		if m == model {
			return 1 << uint(k), k
		}
	}
	return 0, -1
}

// modelBits fills bits[i] with the model bit of card i.
func (ix *fragIndex) modelBits(node *Node, bits []uint64) {
	var lastModel string
	var lastBit uint64
	haveLast := false
	for i, c := range node.Cards {
		if haveLast && c.Model == lastModel {
			bits[i] = lastBit
			continue
		}
		var b uint64
		for k, m := range ix.models {
			if m == c.Model {
				b = 1 << uint(k)
				break
			}
		}
		bits[i], lastModel, lastBit, haveLast = b, c.Model, b, true
	}
}

// maxFastClasses is how many workload classes the measure handles with
// stack buffers; larger workloads use heap buffers.
const maxFastClasses = 64

// nodeView is one node state reduced to what the measure reads: the free
// shares of the cards that have any, sorted ascending, and whether those
// cards are all alike (same model bit and capacity), which allows the
// sorted fast path.
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
}

// load fills the view from free (card i has free[i], ≤ 0: nothing).
// It reports false when the node has more cards than the view holds.
func (v *nodeView) load(node *Node, free []int64, bits []uint64) bool {
	if len(free) > maxStackCards {
		return false
	}
	v.k, v.total, v.alike = 0, 0, true
	for i, f := range free {
		if f <= 0 {
			continue
		}
		c := node.Cards[i].Capacity
		if v.k == 0 {
			v.bit, v.cap0 = bits[i], c
		} else if bits[i] != v.bit || c != v.cap0 {
			v.alike = false
		}
		// Insertion keeps free ascending.
		j := v.k
		for j > 0 && v.free[j-1] > f {
			v.free[j], v.cap[j], v.bits[j] = v.free[j-1], v.cap[j-1], v.bits[j-1]
			j--
		}
		v.free[j], v.cap[j], v.bits[j] = f, c, bits[i]
		v.k++
		v.total += f
	}
	return true
}

// insert adds a card with free f > 0, capacity c and model bit bit to the
// view, as load does (free kept ascending; equal shares keep card order).
// The view must start with k == 0, total == 0 and alike == true.
func (v *nodeView) insert(f, c int64, bit uint64) {
	if v.k == 0 {
		v.bit, v.cap0 = bit, c
	} else if bit != v.bit || c != v.cap0 {
		v.alike = false
	}
	j := v.k
	for j > 0 && v.free[j-1] > f {
		v.free[j], v.cap[j], v.bits[j] = v.free[j-1], v.cap[j-1], v.bits[j-1]
		j--
	}
	v.free[j], v.cap[j], v.bits[j] = f, c, bit
	v.k++
	v.total += f
}

// fitWeights fills fit[c] with the part of class c's weight whose CPU and
// memory fit in host.
func (ix *fragIndex) fitWeights(host *HostResources, fit []float64) {
	if host == nil || host.Fits(ix.maxHost) {
		copy(fit, ix.weights)
		return
	}
	for i := range ix.classes {
		fit[i] = ix.classes[i].hostFitWeight(host)
	}
}

// measureView is measure on a view; fit comes from fitWeights for the
// view's host state. Share classes come first in ix.classes, by ascending
// units, so one walk over the sorted free shares serves them all.
func (ix *fragIndex) measureView(v *nodeView, fit []float64) float64 {
	if v.total == 0 {
		return 0
	}
	t := float64(v.total)
	frag := ix.noGPU * t
	j := 0          // cards with free < the class's units
	var below int64 // their free sum
	full := -1      // cards entirely free (alike views), computed once
	for ci := range ix.classes {
		c := &ix.classes[ci]
		fw := fit[ci]
		if fw < c.weight {
			frag += (c.weight - fw) * t
		}
		if fw <= 0 {
			continue
		}
		if !v.alike {
			n, lost := v.classFit(c)
			if n < c.count {
				frag += fw * t
			} else {
				frag += fw * float64(lost)
			}
			continue
		}
		if !c.anyModel && c.mask&v.bit == 0 {
			frag += fw * t
			continue
		}
		var n int
		var lost int64
		if c.units > 0 {
			for j < v.k && v.free[j] < c.units {
				below += v.free[j]
				j++
			}
			n, lost = v.k-j, below
		} else {
			if full < 0 {
				full = 0
				for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
					full++
				}
			}
			n, lost = full, v.total-int64(full)*v.cap0
		}
		if n < c.count {
			frag += fw * t
		} else {
			frag += fw * float64(lost)
		}
	}
	return frag
}

// classFit is, for class c on a view of unlike cards, how many cards can
// take c's per-card demand and the free share of the others.
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

// fragScratch holds a call's buffers, on the stack for nodes of up to
// maxStackCards cards and workloads of up to maxFastClasses classes.
type fragScratch struct {
	vec          [maxStackCards]int64
	bits         [maxStackCards]uint64
	fitA, fitB   [maxFastClasses]float64
	st           [maxFastClasses]classStat
	viewA, viewB nodeView
}

func (s *fragScratch) fits(ix *fragIndex) (a, b []float64) {
	if n := len(ix.classes); n > maxFastClasses {
		return make([]float64, n), make([]float64, n)
	}
	return s.fitA[:len(ix.classes)], s.fitB[:len(ix.classes)]
}

// beforeFree is what each schedulable card has free before the pod.
func beforeFree(node *Node, out []int64) {
	for i, c := range node.Cards {
		if c.Schedulable() {
			out[i] = c.Free()
		} else {
			out[i] = 0
		}
	}
}

// afterFree turns a policy's free slice into what each card really has free
// after the pod: cards this pod could not use keep their free share.
func afterFree(node *Node, free []int64, out []int64) {
	for i, c := range node.Cards {
		switch f := free[i]; {
		case f >= 0:
			out[i] = f
		case f == Unusable && c.Schedulable():
			out[i] = c.Free()
		default:
			out[i] = 0
		}
	}
}

// hostAfter is the node's free CPU and memory once req is placed, or nil
// when the node's are unknown.
func hostAfter(node *Node, req Request, buf *HostResources) *HostResources {
	if node.HostFree == nil {
		return nil
	}
	*buf = HostResources{CPUMilli: node.HostFree.CPUMilli - req.Host.CPUMilli, MemoryMiB: node.HostFree.MemoryMiB - req.Host.MemoryMiB}
	return buf
}

// fragGrowth is frag after the pod minus frag before, in the node's units
// (negative when placing the pod makes the node less fragmented, e.g. a
// pod that exactly fills a card's unusable leftover).
func fragGrowth(node *Node, free []int64, req Request, w *Workload, cpuOnly bool) float64 {
	return fragGrowthTotals(node, free, req, w, cpuOnly, nil)
}

// fragGrowthTotals is fragGrowth that also fills *tot, when not nil, with
// totalsOf(node, free, w), in the same pass over the cards where it can.
func fragGrowthTotals(node *Node, free []int64, req Request, w *Workload, cpuOnly bool, tot *nodeTotals) float64 {
	ix := w.index()
	if ix == nil || ix.weight == 0 || len(node.Cards) > maxStackCards {
		if tot != nil {
			*tot = totalsOf(node, free, w)
			tot = nil
		}
	}
	if ix == nil || ix.weight == 0 {
		return 0
	}
	var hb, hbefore HostResources
	hostA := hostAfter(node, req, &hb)
	hostB := node.HostFree
	if cpuOnly && hostB != nil {
		hb.MemoryMiB = math.MaxInt64
		hbefore = HostResources{CPUMilli: hostB.CPUMilli, MemoryMiB: math.MaxInt64}
		hostB = &hbefore
	}
	if len(node.Cards) > maxStackCards {
		vec, bits := make([]int64, len(node.Cards)), make([]uint64, len(node.Cards))
		ix.modelBits(node, bits)
		afterFree(node, free, vec)
		after := ix.measure(node, vec, bits, hostA)
		beforeFree(node, vec)
		return after - ix.measure(node, vec, bits, hostB)
	}
	// One pass over the cards: the before state's view (what beforeFree,
	// modelBits and nodeView.load compute) and the card the pod changes.
	// At most one card changed (a share, or a CPU-only pod): the growth
	// follows from the before state's class stats (see growth); otherwise
	// (whole cards) both states are measured.
	var v nodeView
	v.alike = true
	changed, f, fAfter := -1, int64(0), int64(0)
	var cp int64
	var b uint64
	var lastModel string
	var lastBit uint64
	lastK := -1 // lastModel's position in ix.models
	haveLast := false
	for i := range node.Cards {
		c := &node.Cards[i]
		// A card free does not mark Unusable is schedulable (decide marks
		// the others); only the Unusable ones need the state compared.
		var bf int64
		if free[i] != Unusable || c.Schedulable() {
			bf = c.Free()
			if tot != nil { // as totalsOf
				tot.cards++
				tot.capacity += c.Capacity
				tot.before += bf
				a := free[i]
				switch {
				case a == Unusable:
					a = bf
				case a < 0:
					a = 0
				}
				tot.after += a
				if taken := bf - a; taken > 0 && len(ix.pressure) > 0 {
					if !haveLast || c.Model != lastModel {
						lastBit, lastK = ix.modelBit(c.Model)
						lastModel, haveLast = c.Model, true
					}
					if lastK >= 0 {
						tot.scarcity += float64(taken) * ix.pressure[lastK]
					}
				}
			}
		}
		if a := free[i]; a != Unusable && changed != -2 {
			if a < 0 {
				a = 0
			}
			if a != bf {
				if changed >= 0 {
					changed = -2
				} else {
					changed, f, fAfter = i, bf, a
				}
			}
		}
		if bf <= 0 && changed != i {
			continue
		}
		if !haveLast || c.Model != lastModel {
			lastBit, lastK = ix.modelBit(c.Model)
			lastModel, haveLast = c.Model, true
		}
		if changed == i {
			cp, b = c.Capacity, lastBit
		}
		if bf > 0 {
			v.insert(bf, c.Capacity, lastBit)
		}
	}
	if changed == -2 {
		return ix.growthMeasured(node, free, &v, hostA, hostB)
	}
	var u int64
	if changed >= 0 {
		u = f - fAfter
	}
	return ix.growth(&v, hostB, hostA, changed >= 0, f, u, cp, b)
}

// alikeGrowth is growth for a view whose cards are alike (one model and
// capacity) when the node's CPU and memory block no shape before or after
// the pod. Then frag = T·(noGPU + W) − Σ_c weight_c · U_c, with W the
// classes' total weight and U_c the free units of the cards that can take
// class c's per-card demand (0 when fewer than c's card count can): for a
// share class the cards with at least its units free, for a whole-card
// class the unused cards. Summed by card instead of by class, the share
// classes give Σ_i free_i · F(free_i), F(x) the weight of the share classes
// of at most x units (shareCum); the whole-card classes give
// full · capacity · (the weight of those asking for at most full cards).
// Taking u units from a card with free f (f > 0, so it is in the view)
// changes the share part by (f−u)·F(f−u) − f·F(f), and the whole-card part
// only if the card was unused.
func (ix *fragIndex) alikeGrowth(v *nodeView, took bool, f, u int64) float64 {
	if !took {
		return 0
	}
	slot := len(ix.models)
	if v.bit != 0 {
		slot = bits.TrailingZeros64(v.bit)
	}
	cum := ix.shareCum[slot]
	fa := f - u
	var p, q int // share classes of at most f−u, f units
	for p < len(ix.shareUnits) && ix.shareUnits[p] <= fa {
		p++
	}
	for q = p; q < len(ix.shareUnits) && ix.shareUnits[q] <= f; q++ {
	}
	dS := float64(fa)*cum[p] - float64(f)*cum[q]
	if f >= v.cap0 && fa < v.cap0 {
		full := 0
		for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
			full++
		}
		whole := &ix.wholeCum[slot]
		dS += float64(int64(full-1)*v.cap0)*whole[full-1] - float64(int64(full)*v.cap0)*whole[full]
	}
	return (ix.noGPU+ix.gpuWeight)*float64(-u) - dS
}

// alikeGrowthLevels is alikeGrowth when one of the node's free CPU and
// memory blocks no shape before or after the pod but the other may: each
// class then weighs its requests that fit the other, which lt, that
// resource's level table, holds summed (levels lb before and la after the
// pod). With
// S(level, view) = Σ_c fit_c · U_c, growth = −u·(noGPU + W) − (S_A − S_B),
// where S_A − S_B = [S(la, before view) − S(lb, before view)] + the change
// of S(la, ·) when the card goes from f to f−u free.
func (ix *fragIndex) alikeGrowthLevels(v *nodeView, took bool, f, u int64, lt *levelTable, lb, la int) float64 {
	slot := len(ix.models)
	if v.bit != 0 {
		slot = bits.TrailingZeros64(v.bit)
	}
	cumA, wholeA := lt.row(la, slot)
	full := -1
	var dS float64
	if lb != la {
		cumB, wholeB := lt.row(lb, slot)
		p := 0
		for i := 0; i < v.k; i++ {
			for p < len(ix.shareUnits) && ix.shareUnits[p] <= v.free[i] {
				p++
			}
			dS += float64(v.free[i]) * (cumA[p] - cumB[p])
		}
		full = 0
		for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
			full++
		}
		dS += float64(int64(full)*v.cap0) * (wholeA[full] - wholeB[full])
	}
	if !took {
		return -dS
	}
	fa := f - u
	var p, q int // share classes of at most f−u, f units
	for p < len(ix.shareUnits) && ix.shareUnits[p] <= fa {
		p++
	}
	for q = p; q < len(ix.shareUnits) && ix.shareUnits[q] <= f; q++ {
	}
	dS += float64(fa)*cumA[p] - float64(f)*cumA[q]
	if f >= v.cap0 && fa < v.cap0 {
		if full < 0 {
			full = 0
			for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
				full++
			}
		}
		dS += float64(int64(full-1)*v.cap0)*wholeA[full-1] - float64(int64(full)*v.cap0)*wholeA[full]
	}
	return (ix.noGPU+ix.gpuWeight)*float64(-u) - dS
}

// growthMeasured is frag after minus frag before for a pod that changes
// several cards (whole cards): both states are measured. vb is the before
// state's view.
func (ix *fragIndex) growthMeasured(node *Node, free []int64, vb *nodeView, hostA, hostB *HostResources) float64 {
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

// growth is frag after minus frag before when at most one card changes (u
// units taken from a card with free f, capacity cp and model bit b; none
// when !took) and the node's free CPU and memory go from hostB to hostA.
// One pass over the classes computes, per class, the before state's class
// stats (as classStats does), the host fit weights before and after (as
// fitWeights does) and X, what the class loses: T when the node cannot
// host it, else lost (see takeGrowth for how the taken card moves it).
func (ix *fragIndex) growth(v *nodeView, hostB, hostA *HostResources, took bool, f, u, cp int64, b uint64) float64 {
	if v.total == 0 {
		return 0
	}
	allB := hostB == nil || hostB.Fits(ix.maxHost)
	allA := hostA == nil || hostA.Fits(ix.maxHost)
	if v.alike && (!took || f > 0) {
		if allB && allA {
			return ix.alikeGrowth(v, took, f, u)
		}
		// hostB and hostA are not nil here (else allB and allA).
		switch {
		case len(ix.byCPU.share) > 0 && hostB.MemoryMiB >= ix.maxHost.MemoryMiB && hostA.MemoryMiB >= ix.maxHost.MemoryMiB:
			return ix.alikeGrowthLevels(v, took, f, u, &ix.byCPU, ix.byCPU.level(hostB.CPUMilli), ix.byCPU.level(hostA.CPUMilli))
		case len(ix.byMem.share) > 0 && hostB.CPUMilli >= ix.maxHost.CPUMilli && hostA.CPUMilli >= ix.maxHost.CPUMilli:
			return ix.alikeGrowthLevels(v, took, f, u, &ix.byMem, ix.byMem.level(hostB.MemoryMiB), ix.byMem.level(hostA.MemoryMiB))
		}
	}
	t := float64(v.total)
	ta := t - float64(u)
	g := ix.noGPU * (ta - t)
	j := 0          // cards with free < the class's units (alike views)
	var below int64 // their free sum
	full := -1      // cards entirely free (alike views), computed once
	for ci := range ix.classes {
		c := &ix.classes[ci]
		var n int
		var lostU int64
		switch {
		case !v.alike:
			n, lostU = v.classFit(c)
		case !c.anyModel && c.mask&v.bit == 0:
			n, lostU = 0, v.total
		case c.units > 0:
			for j < v.k && v.free[j] < c.units {
				below += v.free[j]
				j++
			}
			n, lostU = v.k-j, below
		default:
			if full < 0 {
				full = 0
				for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
					full++
				}
			}
			n, lostU = full, v.total-int64(full)*v.cap0
		}
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
		lost := float64(lostU)
		x := lost
		xa := x
		if took {
			need := c.units
			if need == 0 {
				need = cp
			}
			switch {
			case n < c.count:
				xa = ta
			case !c.anyModel && c.mask&b == 0, f < need:
				xa = lost - float64(u)
			case f-u >= need:
				xa = lost
			case n-1 >= c.count:
				xa = lost + float64(f-u)
			default:
				xa = ta
			}
		}
		g += (c.weight-fa)*ta + fa*xa - (c.weight-fb)*t - fb*x
	}
	return g
}

// fragChooseCard places a share demand on the card where the node's frag
// grows least (ties: the least leftover, then the lowest index), as FGD
// does. Cards with the same free share, model and capacity are
// interchangeable, so each such group is measured once. Whole-card demands
// take the smallest unused card (bestFit): all unused cards of a node look
// alike to the measure.
//
// The pod's CPU and memory are not known here (Demand carries only the
// GPU part), so the comparison uses the node's free CPU and memory before
// the pod; it is the same for every candidate card.
func fragChooseCard(node *Node, free []int64, d Demand, w *Workload) int {
	ix := w.index()
	if d.WholeCards > 0 || ix == nil || ix.weight == 0 || len(node.Cards) > maxStackCards {
		return bestFit(node, free, d, w)
	}
	// Candidates: one card per (free, model, capacity) group.
	var cand [maxStackCards]int
	nc := 0
	for i := range free {
		if free[i] < d.Units {
			continue
		}
		dup := false
		for _, j := range cand[:nc] {
			if free[j] == free[i] && node.Cards[j].Model == node.Cards[i].Model && node.Cards[j].Capacity == node.Cards[i].Capacity {
				dup = true
				break
			}
		}
		if !dup {
			cand[nc] = i
			nc++
		}
	}
	if nc <= 1 {
		if nc == 0 {
			return -1
		}
		return cand[0]
	}
	var s fragScratch
	n := len(node.Cards)
	vec, bits := s.vec[:n], s.bits[:n]
	ix.modelBits(node, bits)
	afterFree(node, free, vec)
	s.viewB.load(node, vec, bits)
	fit, _ := s.fits(ix)
	ix.fitWeights(node.HostFree, fit)
	st := s.stats(ix)
	ix.classStats(&s.viewB, st)
	best, bestGrowth := -1, 0.0
	for _, i := range cand[:nc] {
		g := ix.takeGrowth(&s.viewB, st, fit, free[i], d.Units, node.Cards[i].Capacity, bits[i])
		switch {
		case best < 0 || g < bestGrowth-ScoreTolerance:
			best, bestGrowth = i, g
		case g <= bestGrowth+ScoreTolerance && free[i] < free[best]:
			best = i
		}
	}
	return best
}

// classStat is, for one class on one node state, how many cards can take
// the class's per-card demand (n) and the free share of the others (lost).
type classStat struct {
	n    int
	lost int64
}

func (s *fragScratch) stats(ix *fragIndex) []classStat {
	if n := len(ix.classes); n > maxFastClasses {
		return make([]classStat, n)
	}
	return s.st[:len(ix.classes)]
}

// classStats fills st with every class's classStat on view v.
func (ix *fragIndex) classStats(v *nodeView, st []classStat) {
	j := 0
	var below int64
	full := -1
	for ci := range ix.classes {
		c := &ix.classes[ci]
		switch {
		case !v.alike:
			st[ci].n, st[ci].lost = v.classFit(c)
		case !c.anyModel && c.mask&v.bit == 0:
			st[ci] = classStat{0, v.total}
		case c.units > 0:
			for j < v.k && v.free[j] < c.units {
				below += v.free[j]
				j++
			}
			st[ci] = classStat{v.k - j, below}
		default:
			if full < 0 {
				full = 0
				for i := v.k - 1; i >= 0 && v.free[i] >= v.cap0; i-- {
					full++
				}
			}
			st[ci] = classStat{full, v.total - int64(full)*v.cap0}
		}
	}
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

// fgdScore is FGD's node score: the less frag grows, the better.
func fgdScore(node *Node, free []int64, req Request, w *Workload) float64 {
	return -fragGrowth(node, free, req, w, false)
}

// The frag policy's weights (docs/packing.md shows how they were chosen:
// on the default trace, 0.5 to 2 for the strand term give the same result
// within 0.05 points; the pack term mostly breaks near-ties; the scarcity
// weight was tried at 0.5, 1 and 2 on gpuspec33).
const (
	FragPackWeight     = 0.01
	FragStrandWeight   = 1.0
	FragScarcityWeight = 2.0
)

// FragOptions tune the fragmentation-aware policy family (NewFragPolicy).
type FragOptions struct {
	Name, Description string
	// PackWeight adds PackWeight × the node's allocated GPU share after
	// placement (0..1, binpack's score) to the main term, −Δfrag in cards.
	// 0 is FGD's score.
	PackWeight float64
	// CPUOnly ignores memory when the measure checks whether a shape fits a
	// node's host resources, as the FGD paper does.
	CPUOnly bool
	// StrandWeight subtracts StrandWeight × the growth of the node's
	// stranded GPU, in cards (see strandGrowth).
	StrandWeight float64
	// BestFitCard places a share on the card that keeps least (binpack's
	// choice) instead of FGD's least-fragmentation card.
	BestFitCard bool
	// ScarcityWeight subtracts ScarcityWeight × the pod's GPU request in
	// cards × the pressure on the models it lands on (see modelPressure and
	// scarcityCost). Needs Workload.ModelCapacity.
	ScarcityWeight float64
}

// NewFragPolicy builds a fragmentation-aware policy: FGD's card choice (or
// best fit with BestFitCard), and a node score of −Δfrag (in cards) plus the
// options' terms.
func NewFragPolicy(o FragOptions) *Policy {
	choose := fragChooseCard
	if o.BestFitCard {
		choose = bestFit
	}
	return &Policy{
		Name:        o.Name,
		Description: o.Description,
		ChooseCard:  choose,
		Score: func(node *Node, free []int64, req Request, w *Workload) float64 {
			var t nodeTotals
			g := fragGrowthTotals(node, free, req, w, o.CPUOnly, &t)
			unit := t.cardUnits()
			s := -g / unit
			if o.PackWeight != 0 && t.capacity > 0 {
				s += o.PackWeight * float64(t.capacity-t.after) / float64(t.capacity)
			}
			if o.StrandWeight != 0 {
				s -= o.StrandWeight * t.strandGrowth(node, req, w) / unit
			}
			if o.ScarcityWeight != 0 {
				s -= o.ScarcityWeight * t.scarcity / unit
			}
			return s
		},
	}
}

// nodeTotals is one pass over a node's schedulable cards for the frag
// policy's terms.
type nodeTotals struct {
	cards int
	// capacity, and free before and after the pod (cards the pod could not
	// use keep their free share), in units.
	capacity, before, after int64
	// scarcity is the GPU the pod takes, each unit weighted by its model's
	// pressure (see scarcityCost).
	scarcity float64
}

func totalsOf(node *Node, free []int64, w *Workload) nodeTotals {
	var t nodeTotals
	var pressure []float64
	var models []string
	if ix := w.index(); ix != nil {
		pressure, models = ix.pressure, ix.models
	}
	lastModel, lastP := "", 0.0
	haveLast := false
	for i := range node.Cards {
		// By pointer, and the state compared only for cards free marks
		// Unusable: decide marks every unschedulable card so.
		c := &node.Cards[i]
		if free[i] == Unusable && !c.Schedulable() {
			continue
		}
		t.cards++
		t.capacity += c.Capacity
		b := c.Free()
		t.before += b
		a := free[i]
		switch {
		case a == Unusable:
			a = b
		case a < 0:
			a = 0
		}
		t.after += a
		if taken := b - a; taken > 0 && len(pressure) > 0 {
			if !haveLast || c.Model != lastModel {
				lastModel, lastP, haveLast = c.Model, 0, true
				if k := slices.Index(models, c.Model); k >= 0 {
					lastP = pressure[k]
				}
			}
			t.scarcity += float64(taken) * lastP
		}
	}
	return t
}

// cardUnits is the mean card capacity (1 without cards), to express terms
// in cards.
func (t nodeTotals) cardUnits() float64 {
	if t.cards == 0 || t.capacity == 0 {
		return 1
	}
	return float64(t.capacity) / float64(t.cards)
}

// bestFitScore is the FGD paper's BestFit baseline: prefer the node with the
// least left after placement, CPU and GPU weighed equally against a 128-core,
// 8-GPU reference node: score = −(0.5·CPU_left/128 cores + 0.5·GPU_left/8
// cards). GPU_left counts each card's free share as a fraction of the card.
// Without host information only the GPU term counts.
//
// Worked example: 32 cores and 2.5 cards left: −(0.5·32/128 + 0.5·2.5/8) =
// −0.28125.
func bestFitScore(node *Node, free []int64, req Request, _ *Workload) float64 {
	var cards float64
	for i, c := range node.Cards {
		if !c.Schedulable() || c.Capacity <= 0 {
			continue
		}
		f := free[i]
		if f == Unusable {
			f = c.Free()
		}
		if f > 0 {
			cards += float64(f) / float64(c.Capacity)
		}
	}
	score := -0.5 * cards / 8
	if node.HostFree != nil {
		cpuLeft := node.HostFree.CPUMilli - req.Host.CPUMilli
		score -= 0.5 * float64(cpuLeft) / 128000
	}
	return score
}

// strandGrowth is how much the node's stranded GPU grows with the pod.
//
// Stranded GPU is free GPU that the node's CPU and memory cannot feed if
// future GPU pods ask for them in the workload's proportions: with free GPU
// G units, free CPU C and memory M, and the workload's GPU pods asking rc
// millicores and rm MiB per GPU unit, the node can use at most
// min(G, C/rc, M/rm) units; the rest, max(0, G − min(C/rc, M/rm)), is
// stranded. Where FGD's measure looks one pod ahead, this looks at the node
// filled with the workload's average GPU pod: it sees that a CPU-only pod
// on a node with many free cards eats the CPU those cards will need.
//
// Worked example: 4 free cards (4,000 units), 20 cores and plenty of memory
// free, GPU pods asking 10 cores per card (rc = 10 millicores per unit):
// usable min(4000, 20000/10) = 2,000, stranded 2,000 units (2 cards).
func strandGrowth(node *Node, free []int64, req Request, w *Workload) float64 {
	return totalsOf(node, free, w).strandGrowth(node, req, w)
}

func (t nodeTotals) strandGrowth(node *Node, req Request, w *Workload) float64 {
	ix := w.index()
	if ix == nil || node.HostFree == nil || ix.gpuCPU+ix.gpuMem == 0 || t.cards == 0 {
		return 0
	}
	units := ix.gpuShareUnits + ix.gpuWholeCards*t.cardUnits()
	if units <= 0 {
		return 0
	}
	rc, rm := ix.gpuCPU/units, ix.gpuMem/units
	h := *node.HostFree
	ha := HostResources{CPUMilli: h.CPUMilli - req.Host.CPUMilli, MemoryMiB: h.MemoryMiB - req.Host.MemoryMiB}
	return stranded(float64(t.after), ha, rc, rm) - stranded(float64(t.before), h, rc, rm)
}

func stranded(g float64, h HostResources, rc, rm float64) float64 {
	usable := g
	if rc > 0 {
		usable = min(usable, max(0, float64(h.CPUMilli))/rc)
	}
	if rm > 0 {
		usable = min(usable, max(0, float64(h.MemoryMiB))/rm)
	}
	return g - usable
}

// scarcityCost is the GPU the pod takes on this node, each unit weighted by
// the pressure on its card's model: taking a scarce model's capacity for a
// pod that could run elsewhere costs the pods that cannot. For a pod that
// insists on one model it is the same on every node it fits, so it only
// steers pods that have a choice.
func scarcityCost(node *Node, free []int64, w *Workload) float64 {
	return totalsOf(node, free, w).scarcity
}
