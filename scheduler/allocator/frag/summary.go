package frag

import (
	"slices"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The fast path on a summarized node whose cards with free units are alike
// (allocator.Summary): what sharePass.run, the card choice and the closed
// form of the growth compute from the node's cards, computed from its
// summary, which holds the same integers (the free shares in card order,
// the totals) in the node's own memory. At 5,000 nodes of 8 cards the cards
// do not fit in the L2 cache, and reading them was most of the fast path's
// cost. The same functions compute the same floating-point operations in
// the same order, so the decision is the same to the bit
// (TestSummaryPathEqualsCardPath).

// summaryShare is the growth of frag and the node's totals when a share of
// u units is placed on a node whose summary s is alike (s.Alike), its free
// CPU and memory going from hostB to hostA: on the best-fit card, or with
// fgdCard on FGD's card (compared at hostB, which must then be the node's
// CPU and memory before the pod, memory included). ok is false when no
// card has u units free.
func (ix *fragIndex) summaryShare(s *allocator.Summary, u int64, fgdCard bool, hostB, hostA *allocator.HostResources) (g float64, t nodeTotals, ok bool) {
	if s.MaxFree < u {
		return 0, t, false
	}
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
	slot, pressure := ix.modelSlot(s.Model)
	rb, okB := ix.tableRow(slot, hostB)
	ra, okA := ix.tableRow(slot, hostA)
	if !okB || !okA {
		var buf [2]rowBuf // declared here: most nodes need no computed row
		rb, ra = ix.computeMissing(slot, hostB, hostA, rb, okB, ra, okA, &buf)
	}
	if fgdCard {
		card = ix.alikeFGDCard(free, unused, s.CardCapacity, rb, u)
	}
	g = ix.alikeGrowth(alikeShares{free: free, unused: unused, cap0: s.CardCapacity}, rb, ra, true, free[card], u)
	t = nodeTotals{cards: s.Cards, capacity: s.Capacity, before: s.Free, after: s.Free - u}
	t.scarcity += float64(u) * pressure
	return g, t, true
}

// alikeFGDCard is fragChooseCard's choice among alike cards with free
// shares free (unused of them unused, of capacity cap0), row r that of the
// node's CPU and memory: the candidates are the first card of each free
// share of at least u.
func (ix *fragIndex) alikeFGDCard(free []int64, unused int, cap0 int64, r fitRow, u int64) int {
	var cand [allocator.AlikeShares]int
	nc := 0
	for i, f := range free {
		if f >= u && !slices.ContainsFunc(cand[:nc], func(j int) bool { return free[j] == f }) {
			cand[nc] = i
			nc++
		}
	}
	if nc == 1 {
		return cand[0]
	}
	var g [allocator.AlikeShares]float64
	for k, i := range cand[:nc] {
		g[k] = -ix.takeDelta(cap0, r, unused, free[i], u)
	}
	return leastGrowth(cand[:nc], g[:nc], free)
}

// modelSlot is model's slot in the index's tables (see nodeView.slot) and
// its pressure (see modelMemo.lookup).
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
