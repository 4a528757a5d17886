// Package frag holds gpushare's fragmentation-aware placement policies, fgd
// and frag (New, NewFGD), over allocator's shared decision core, and the
// index of the workload they read (see docs/packing.md).
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
// fgd policy does that. The workload is learned online
// (allocator.Workload.Observe):
// nothing reads ahead.
//
// The frag policy places a share on the best-fit card of a node (on the
// openb traces it packs as well as FGD's least-fragmentation card, for a
// third less work) and adds three terms to FGD's node score, all in cards
// (see New and docs/packing.md for the measurements behind them):
//   - stranded GPU (strandGrowth): FGD looks one pod ahead, so a CPU-only or
//     CPU-heavy pod that leaves a node's free cards without the CPU or
//     memory to feed them costs nothing until a single pod no longer fits.
//     The strand term looks at the node filled with the workload's average
//     GPU pod and charges the GPU its CPU and memory cannot feed;
//   - model scarcity (nodeTotals.scarcity): a pod that may run on several models
//     pays for taking capacity of a model that the pods insisting on it will
//     need (needs Workload.ModelCapacity, the cluster's cards per model);
//   - binpack's score (the allocated share), with a small weight: among nodes that the
//     other terms rate alike, the fuller one, keeping empty nodes for
//     8-card pods.
//
// Worked example (one node, two cards of 1,000 units each with 300 and
// 1,000 free, plenty of CPU; workload: half the pods ask for 500 units,
// half for one whole card): for the 500 shape the card with 300 free is
// unusable (300); for the whole-card shape the partly used card is unusable
// (300) and the other one fits: frag = 0.5·300 + 0.5·300 = 300.
//
// docs/design.md maps the files; measure.go is the definition the property
// tests check the others against.

package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// fragChooseCard places a share demand on the card where the node's frag
// grows least (ties: the least leftover, then the lowest index), as FGD
// does. On alike cards the growth is the closed form's (closed.go), each
// free share measured once; on others, the definition's. Whole-card
// demands take the smallest unused card (allocator.BestFitCard): all
// unused cards of a node look alike to the measure.
//
// The pod's CPU and memory are not known here (Demand carries only the
// GPU part), so the comparison uses the node's free CPU and memory before
// the pod; it is the same for every candidate card.
func fragChooseCard(node *allocator.Node, free []int64, d allocator.Demand, w *allocator.Workload) int {
	ix := index(w)
	n := len(node.Cards)
	if d.WholeCards > 0 || ix == nil || ix.weight == 0 || n > maxStackCards {
		return allocator.BestFitCard(node, free, d, w)
	}
	// The node as it is with the pod's earlier containers placed.
	var after [maxStackCards]int64
	afterFree(node, free, after[:n])
	v, model, alike := alikeView(node, after[:n])
	if alike {
		slot, _ := ix.modelSlot(model)
		r, ok := ix.tableRow(slot, node.HostFree)
		if !ok {
			var buf rowBuf
			r = ix.computeRow(slot, node.HostFree, &buf)
		}
		return ix.alikeFGDCard(free, v.unused, v.cap0, r, d.Units)
	}
	var bits [maxStackCards]uint64
	ix.modelBits(node, bits[:n])
	base := ix.measure(node, after[:n], bits[:n], node.HostFree)
	best := leastGrowth{card: -1}
	for i := range free[:n] {
		if free[i] >= d.Units {
			after[i] -= d.Units
			best.offer(i, ix.measure(node, after[:n], bits[:n], node.HostFree)-base, free)
			after[i] += d.Units
		}
	}
	return best.card
}

// alikeView reports whether the cards with free units (card i has
// free[i]) are alike: one model and capacity, and at least one. v counts
// the unused ones and holds their capacity (not their shares).
func alikeView(node *allocator.Node, free []int64) (v alikeShares, model string, alike bool) {
	for i, f := range free {
		if f <= 0 {
			continue
		}
		c := &node.Cards[i]
		switch {
		case !alike:
			v.cap0, model, alike = c.Capacity, c.Model, true
		case c.Capacity != v.cap0 || c.Model != model:
			return v, model, false
		}
		if f >= c.Capacity {
			v.unused++
		}
	}
	return v, model, alike
}

// leastGrowth is the candidate card of least growth among those offered
// (card −1 before any): ties (within ScoreTolerance) go to the one with
// the least free, then to the first.
type leastGrowth struct {
	card   int
	growth float64
}

// offer offers card i, whose growth is g (free[i] its free share).
func (l *leastGrowth) offer(i int, g float64, free []int64) {
	switch {
	case l.card < 0 || g < l.growth-allocator.ScoreTolerance:
		l.card, l.growth = i, g
	case g <= l.growth+allocator.ScoreTolerance && free[i] < free[l.card]:
		l.card = i
	}
}

// fgdScore is FGD's node score: the less frag grows, the better.
func fgdScore(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload) float64 {
	return -fragGrowth(node, free, req, w)
}

// NewFGD is the fgd policy: FGD's card choice and node score, nothing else.
func NewFGD() *allocator.Policy {
	return &allocator.Policy{
		Name:        "fgd",
		Description: "FGD (USENIX ATC 2023): the node and card where the expected fragmentation, against the workload seen so far, grows least",
		ChooseCard:  fragChooseCard,
		Score:       fgdScore,
		FastEvaluate: shareFastPath(false, func(_ *allocator.Node, _ allocator.Request, _ *fragIndex, g float64, _ nodeTotals) float64 {
			return -g
		}),
	}
}

// The frag policy's weights (docs/packing.md shows how they were chosen:
// on the default trace, 0.5 to 2 for the strand term give the same result
// within 0.05 points; the pack term mostly breaks near-ties; the scarcity
// weight was tried at 0.5, 1 and 2 on gpuspec33).
const (
	PackWeight     = 0.01
	StrandWeight   = 1.0
	ScarcityWeight = 2.0
)

// New is the frag policy: best-fit card, and a node score of FGD's
// (−Δfrag, in cards) with the stranded-GPU, scarcity and binpack terms at
// the weights above.
func New() *allocator.Policy {
	return newPolicy(options{
		Name:           "frag",
		Description:    "fragmentation-aware: best-fit card on the node where FGD's fragmentation growth, plus the growth of GPU stranded by CPU/memory, the scarcity of the models taken and a little binpack, costs least",
		PackWeight:     PackWeight,
		StrandWeight:   StrandWeight,
		ScarcityWeight: ScarcityWeight,
		BestFitCard:    true,
	})
}

// options tune the fragmentation-aware policy family (newPolicy).
type options struct {
	Name, Description string
	// PackWeight adds PackWeight × the node's allocated GPU share after
	// placement (0..1, binpack's score) to the main term, −Δfrag in cards.
	// 0 is FGD's score.
	PackWeight float64
	// StrandWeight subtracts StrandWeight × the growth of the node's
	// stranded GPU, in cards (see strandGrowth).
	StrandWeight float64
	// BestFitCard places a share on the card that keeps least (binpack's
	// choice) instead of FGD's least-fragmentation card.
	BestFitCard bool
	// ScarcityWeight subtracts ScarcityWeight × the pod's GPU request in
	// cards × the pressure on the models it lands on (see modelPressure and
	// nodeTotals.scarcity). Needs Workload.ModelCapacity.
	ScarcityWeight float64
}

// newPolicy builds a fragmentation-aware policy: FGD's card choice (or
// best fit with BestFitCard), and a node score of −Δfrag (in cards) plus the
// options' terms.
func newPolicy(o options) *allocator.Policy {
	choose := fragChooseCard
	if o.BestFitCard {
		choose = allocator.BestFitCard
	}
	return &allocator.Policy{
		Name:        o.Name,
		Description: o.Description,
		ChooseCard:  choose,
		Score: func(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload) float64 {
			var t nodeTotals
			g := fragGrowthTotals(node, free, req, w, &t)
			return o.score(node, req, index(w), g, t)
		},
		FastEvaluate: shareFastPath(o.BestFitCard, o.score),
	}
}

// score is the policy's node score from the growth g and the node totals t
// (ix is the workload's index).
func (o *options) score(node *allocator.Node, req allocator.Request, ix *fragIndex, g float64, t nodeTotals) float64 {
	unit := t.cardUnits()
	s := -g / unit
	if o.PackWeight != 0 && t.capacity > 0 {
		s += o.PackWeight * float64(t.capacity-t.after) / float64(t.capacity)
	}
	if o.StrandWeight != 0 {
		s -= o.StrandWeight * t.strandGrowth(node, req, ix) / unit
	}
	if o.ScarcityWeight != 0 {
		s -= o.ScarcityWeight * t.scarcity / unit
	}
	return s
}
