package allocator

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
// A policy places a pod where frag grows least (FGD's "gradient descent").
// The workload is learned online (Workload.Observe); nothing reads ahead.
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

// take returns a copy of v with u units taken from a card with free f (of
// that capacity and bit).
func (v *nodeView) take(f, u, c int64, bit uint64) nodeView {
	out := *v
	// Remove one card with free f, capacity c and bit.
	i := 0
	for i < out.k && !(out.free[i] == f && out.cap[i] == c && out.bits[i] == bit) {
		i++
	}
	copy(out.free[i:out.k], out.free[i+1:out.k])
	copy(out.cap[i:out.k], out.cap[i+1:out.k])
	copy(out.bits[i:out.k], out.bits[i+1:out.k])
	out.k--
	out.total -= f
	if left := f - u; left > 0 {
		j := out.k
		for j > 0 && out.free[j-1] > left {
			out.free[j], out.cap[j], out.bits[j] = out.free[j-1], out.cap[j-1], out.bits[j-1]
			j--
		}
		out.free[j], out.cap[j], out.bits[j] = left, c, bit
		out.k++
		out.total += left
	}
	return out
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
func fragGrowth(node *Node, free []int64, req Request, w *Workload) float64 {
	ix := w.index()
	if ix == nil || ix.weight == 0 {
		return 0
	}
	var hb HostResources
	hostA := hostAfter(node, req, &hb)
	if len(node.Cards) > maxStackCards {
		vec, bits := make([]int64, len(node.Cards)), make([]uint64, len(node.Cards))
		ix.modelBits(node, bits)
		afterFree(node, free, vec)
		after := ix.measure(node, vec, bits, hostA)
		beforeFree(node, vec)
		return after - ix.measure(node, vec, bits, node.HostFree)
	}
	var s fragScratch
	n := len(node.Cards)
	vec, bits := s.vec[:n], s.bits[:n]
	ix.modelBits(node, bits)
	fitA, fitB := s.fits(ix)
	beforeFree(node, vec)
	s.viewB.load(node, vec, bits)
	ix.fitWeights(node.HostFree, fitB)
	afterFree(node, free, vec)
	s.viewA.load(node, vec, bits)
	ix.fitWeights(hostA, fitA)
	return ix.measureView(&s.viewA, fitA) - ix.measureView(&s.viewB, fitB)
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
	best, bestFrag := -1, 0.0
	for _, i := range cand[:nc] {
		s.viewA = s.viewB.take(free[i], d.Units, node.Cards[i].Capacity, bits[i])
		f := ix.measureView(&s.viewA, fit)
		switch {
		case best < 0 || f < bestFrag-ScoreTolerance:
			best, bestFrag = i, f
		case f <= bestFrag+ScoreTolerance && free[i] < free[best]:
			best = i
		}
	}
	return best
}

// fgdScore is FGD's node score: the less frag grows, the better.
func fgdScore(node *Node, free []int64, req Request, w *Workload) float64 {
	return -fragGrowth(node, free, req, w)
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
