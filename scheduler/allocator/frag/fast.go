package frag

import (
	"slices"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The fast path of the fgd and frag policies, earned by
// BenchmarkFragEvaluateAll and BenchmarkFGDEvaluateAll (5,000 nodes × 8
// cards): Evaluate for the common request, one container asking for a
// share of one card with no model or card choice, on a node whose cards
// with free units are alike (allocator.Summary.Alike). It reads the node's
// summary (the extender's cache summarizes every snapshot; a node never
// summarized is summarized here from its cards) instead of the cards: at
// 5,000 nodes of 8 cards the cards do not fit in the L2 cache. The card
// choice and the closed form of the growth (closed.go) are the functions
// decide's ChooseCard and Score call on the same integers, in the same
// order, so the decision is the same to the bit (TestFastPathEqualsDecide,
// TestSummaryPathEqualsCardPath). Every other request and node, and a node
// where no card fits (decide says why), goes to decide.

// shareFastPath returns the fast path of a frag-family policy: bestFitCard
// as in options (else FGD's card), and score the policy's score from the
// growth and the node totals.
func shareFastPath(bestFitCard bool, score func(node *allocator.Node, req allocator.Request, ix *fragIndex, g float64, t nodeTotals) float64) func(*allocator.Node, allocator.Request, *allocator.Workload) (allocator.Decision, bool) {
	return func(node *allocator.Node, req allocator.Request, w *allocator.Workload) (allocator.Decision, bool) {
		ix := index(w)
		if len(req.Demands) != 1 || len(req.Models) != 0 || req.Cards != nil || ix == nil || ix.weight == 0 ||
			node.InventoryErr != nil {
			return allocator.Decision{}, false
		}
		d := req.Demands[0]
		if d.WholeCards > 0 || d.Units <= 0 {
			return allocator.Decision{}, false
		}
		s := node.Summary()
		if s == nil {
			cs := node.CardSummary()
			s = &cs
		}
		if !s.Alike || s.MaxFree < d.Units {
			return allocator.Decision{}, false
		}
		var ha allocator.HostResources
		g, t := ix.summaryShare(s, d.Units, !bestFitCard, node.HostFree, hostAfter(node, req, &ha))
		return allocator.Decision{Node: node.Name, Fits: true, Score: score(node, req, ix, g, t)}, true
	}
}

// summaryShare is the growth of frag and the node's totals when a share of
// u units is placed on a node whose summary s is alike and has a card with
// u free, its free CPU and memory going from hostB to hostA: on the
// best-fit card, or with fgdCard on FGD's card (compared at hostB).
func (ix *fragIndex) summaryShare(s *allocator.Summary, u int64, fgdCard bool, hostB, hostA *allocator.HostResources) (g float64, t nodeTotals) {
	// Every card with u free has some free, so it is among the shares.
	free := s.Shares[:s.N]
	card, unused := -1, 0
	for i, f := range free {
		if f >= s.CardCapacity {
			unused++
		}
		if f >= u && (card < 0 || f < free[card]) {
			card = i
		}
	}
	v := alikeShares{free: free, unused: unused, cap0: s.CardCapacity}
	slot, pressure := ix.modelSlot(s.Model)
	rb, okB := ix.tableRow(slot, hostB)
	ra, okA := ix.tableRow(slot, hostA)
	if !okB || !okA {
		var buf [2]rowBuf // declared here: most nodes need no computed row
		rb, ra = ix.computeMissing(slot, hostB, hostA, rb, okB, ra, okA, &buf)
	}
	if fgdCard {
		card = ix.alikeFGDCard(v.free, v.unused, v.cap0, rb, u)
	}
	g = ix.alikeGrowth(v, rb, ra, true, v.free[card], u)
	t = nodeTotals{cards: s.Cards, capacity: s.Capacity, before: s.Free, after: s.Free - u}
	t.scarcity += float64(u) * pressure
	return g, t
}

// alikeFGDCard is fragChooseCard's choice among cards whose free shares
// are free (≤ 0: none), those with free units alike (unused of them
// unused, of capacity cap0), row r that of the node's CPU and memory: the
// candidates are the first card of each free share of at least u; −1 when
// there is none.
func (ix *fragIndex) alikeFGDCard(free []int64, unused int, cap0 int64, r fitRow, u int64) int {
	best := leastGrowth{card: -1}
	for i, f := range free {
		if f >= u && !slices.Contains(free[:i], f) {
			best.offer(i, -ix.takeDelta(cap0, r, unused, f, u), free)
		}
	}
	return best.card
}

// modelSlot is model's slot in the index's tables (its position in
// ix.models, or len(ix.models) for a model no shape names) and its
// pressure (0 for a model no shape names, or without ModelCapacity).
func (ix *fragIndex) modelSlot(model string) (slot int, pressure float64) {
	_, pos, known := ix.modelBit(model)
	if !known {
		return len(ix.models), 0
	}
	if pos < len(ix.pressure) {
		pressure = ix.pressure[pos]
	}
	return pos, pressure
}
