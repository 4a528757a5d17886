package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// The fast path of the fgd and frag policies: Evaluate for the common
// request, one container asking for a share of one card with no model
// constraint and no card choice, on a node of at most maxStackCards cards, in one pass over
// the cards instead of decide's pass, the card choice's and the score's.
// It gives exactly what decide gives with the policy's ChooseCard and
// Score: the pass fills the same nodeScan that the score's own pass
// would, and the card choice, the growth and the score come from the same
// functions (TestFastPathEqualsDecide). Every other request and node, and
// a node where no card fits (decide says why), goes to decide. On a
// summarized node whose cards with free units are alike, the pass reads
// the node's summary instead of its cards (summary.go).

// shareFastPath returns the fast path of a frag-family policy: bestFitCard
// as in options (else FGD's card), cpuOnly as in options, and score
// the policy's score from the growth and the node totals.
func shareFastPath(bestFitCard, cpuOnly bool, score func(node *allocator.Node, req allocator.Request, ix *fragIndex, g float64, t nodeTotals) float64) func(*allocator.Node, allocator.Request, *allocator.Workload) (allocator.Decision, bool) {
	return func(node *allocator.Node, req allocator.Request, w *allocator.Workload) (allocator.Decision, bool) {
		ix := index(w)
		if len(req.Demands) != 1 || len(req.Models) != 0 || req.Cards != nil || ix == nil || ix.weight == 0 ||
			node.InventoryErr != nil || len(node.Cards) > maxStackCards {
			return allocator.Decision{}, false
		}
		d := req.Demands[0]
		if d.WholeCards > 0 || d.Units <= 0 {
			return allocator.Decision{}, false
		}
		hb, ha, known := hostStates(node, req, cpuOnly)
		var hostB, hostA *allocator.HostResources
		if known {
			hostB, hostA = &hb, &ha
		}
		// With cpuOnly, FGD's card is compared at a host state the growth
		// does not read: such a policy reads the cards.
		if s := node.Summary(); s != nil && s.Alike && (bestFitCard || !cpuOnly) {
			g, t, ok := ix.summaryShare(s, d.Units, !bestFitCard, hostB, hostA)
			if !ok {
				return allocator.Decision{}, false
			}
			return allocator.Decision{Node: node.Name, Fits: true, Score: score(node, req, ix, g, t)}, true
		}
		var p sharePass
		p.run(node, ix, d.Units, !bestFitCard)
		if p.fits == 0 {
			return allocator.Decision{}, false
		}
		// FGD's card is compared at the node's CPU and memory before the
		// pod, memory included: with cpuOnly, or on unlike cards, it is
		// chosen here; on alike cards otherwise from the rows the growth
		// reads (alikeShare).
		card, fgdLater := p.bestFit, false
		switch {
		case bestFitCard:
		case cpuOnly || !p.scan.before.alike:
			card = ix.fgdCard(&p, node, d.Units)
		default:
			fgdLater = true
		}
		var g float64
		if p.scan.before.alike {
			g = ix.alikeShare(&p, node, d.Units, card, fgdLater, hostB, hostA)
		} else {
			p.place(node, card, d.Units)
			s := &p.scan
			g = ix.classGrowth(&s.before, hostB, hostA, true, s.f, s.u, s.cp, s.bit)
		}
		return allocator.Decision{Node: node.Name, Fits: true, Score: score(node, req, ix, g, p.scan.tot)}, true
	}
}

// alikeShare places the share of u units on a node of alike cards and
// returns the growth: on card, or with fgdCard on FGD's card, chosen with
// the row of the node's host before the pod that the growth reads too.
func (ix *fragIndex) alikeShare(p *sharePass, node *allocator.Node, u int64, card int, fgdCard bool, hostB, hostA *allocator.HostResources) float64 {
	slot := p.scan.before.slot(ix)
	rb, okB := ix.tableRow(slot, hostB)
	ra, okA := ix.tableRow(slot, hostA)
	if !okB || !okA {
		var buf [2]rowBuf // declared here: most nodes need no computed row
		rb, ra = ix.computeMissing(slot, hostB, hostA, rb, okB, ra, okA, &buf)
	}
	return ix.alikeShareRows(p, node, u, card, fgdCard, rb, ra)
}

// alikeShareRows is alikeShare with the rows before (rb) and after (ra).
func (ix *fragIndex) alikeShareRows(p *sharePass, node *allocator.Node, u int64, card int, fgdCard bool, rb, ra fitRow) float64 {
	v := &p.scan.before
	if fgdCard {
		card = p.cand[0]
		if p.nc > 1 {
			var g [maxStackCards]float64
			for k, i := range p.cand[:p.nc] {
				g[k] = -ix.takeDelta(v.cap0, rb, v.unused, p.free[i], u)
			}
			card = leastGrowth(p.cand[:p.nc], g[:p.nc], p.free[:len(node.Cards)])
		}
	}
	p.place(node, card, u)
	return ix.alikeGrowth(v.alikeShares(), rb, ra, true, p.scan.f, u)
}

// sharePass is one pass over a node's cards for a share of u units.
type sharePass struct {
	// scan is the node before the pod, as nodeScan.scan would find it
	// once place has put the share on a card.
	scan nodeScan
	// free is what each card has free (0 for cards not schedulable).
	free [maxStackCards]int64
	// fits counts the cards with at least u free; bestFit is the one with
	// the least (the first of those with the least), bestFit's choice, and
	// bestFree what it has.
	fits     int
	bestFit  int
	bestFree int64
	// cand are FGD's candidates (see fragChooseCard): the first card of
	// each (free, model, capacity) group of the cards that fit.
	cand [maxStackCards]int
	nc   int
}

// run fills p from node; withCandidates gathers FGD's candidates.
func (p *sharePass) run(node *allocator.Node, ix *fragIndex, u int64, withCandidates bool) {
	p.scan.lastModel.ix = ix
	for i := range node.Cards {
		c := &node.Cards[i]
		if !c.Schedulable() {
			continue
		}
		f := c.Free()
		p.free[i] = f
		if f == 0 {
			p.scan.tot.add(c.Capacity, 0, 0, 0)
			continue
		}
		bit, _ := p.scan.lastModel.lookup(c.Model)
		p.scan.tot.add(c.Capacity, f, f, 0)
		p.scan.before.add(f, c.Capacity, bit)
		if f < u {
			continue
		}
		if p.fits == 0 || f < p.bestFree {
			p.bestFit, p.bestFree = i, f
		}
		p.fits++
		if withCandidates && !p.grouped(node, i) {
			p.cand[p.nc] = i
			p.nc++
		}
	}
}

// grouped reports whether card i has the free share, model and capacity of
// a candidate already found.
func (p *sharePass) grouped(node *allocator.Node, i int) bool {
	for _, j := range p.cand[:p.nc] {
		if p.free[j] == p.free[i] && node.Cards[j].Model == node.Cards[i].Model && node.Cards[j].Capacity == node.Cards[i].Capacity {
			return true
		}
	}
	return false
}

// place records the share of u units on card i in p.scan, as scan records
// the card the pod changed.
func (p *sharePass) place(node *allocator.Node, i int, u int64) {
	c := &node.Cards[i]
	bit, pressure := p.scan.lastModel.lookup(c.Model)
	s := &p.scan
	s.changed, s.f, s.u, s.cp, s.bit = 1, p.free[i], u, c.Capacity, bit
	s.tot.after -= u
	s.tot.scarcity += float64(u) * pressure
}

// fgdCard is fragChooseCard's choice for the pass's candidates.
func (ix *fragIndex) fgdCard(p *sharePass, node *allocator.Node, u int64) int {
	if p.nc == 1 {
		return p.cand[0]
	}
	n := len(node.Cards)
	var g [maxStackCards]float64
	if v := &p.scan.before; v.alike {
		ix.alikeTakeGrowths(v, node.HostFree, p.free[:n], u, p.cand[:p.nc], g[:p.nc])
	} else {
		ix.takeGrowths(v, node, p.free[:n], u, p.cand[:p.nc], g[:p.nc])
	}
	return leastGrowth(p.cand[:p.nc], g[:p.nc], p.free[:n])
}
