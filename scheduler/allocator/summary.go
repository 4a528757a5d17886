package allocator

// A node's summary: the totals of its schedulable cards, kept beside the
// cards so that the policies whose share decision reads only totals
// (binpack, spread) decide the common request, one container asking for a
// share of one card with no model or card choice, without reading the
// cards. At 5,000 nodes × 8 cards the cards are 3.2 MB, beyond the L2
// cache: reading every card costs more than deciding. The summary is 32
// bytes in the Node itself.

// summary is the totals of a node's schedulable cards.
type summary struct {
	// ok says the summary is set (Summarize) and may be read.
	ok bool
	// capacity, free and maxFree are the sum of the schedulable cards'
	// Capacity, the sum of their Free(), and the largest Free().
	capacity, free, maxFree int64
}

// Summarize records in n the totals of its schedulable cards, which the
// fast paths of binpack and spread read instead of the cards. Call it once
// n's cards and InventoryErr are final: the summary is not kept up to date,
// and a node changed after Summarize decides as the summary says. The
// extender's cache summarizes every snapshot it builds (it never changes
// one); a node never summarized is decided from its cards.
func (n *Node) Summarize() {
	s := summary{ok: n.InventoryErr == nil}
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Schedulable() {
			continue
		}
		f := c.Free()
		s.capacity += c.Capacity
		s.free += f
		s.maxFree = max(s.maxFree, f)
	}
	n.sum = s
}

// Summarized reports whether Summarize was called on n.
func (n *Node) Summarized() bool { return n.sum.ok }

// totalsFastPath returns the fast path of a policy whose card choice puts a
// share on some card that fits and whose score, for a share, reads only the
// schedulable capacity and what is left of it: score(capacity, left).
//
// It gives exactly what decide gives (TestTotalsFastPathEqualsDecide): with
// no model or card choice every schedulable card is usable, a card fits
// when one has maxFree, the share comes off the free units whichever card
// takes it, and decide's score sums the same integers. A node not
// summarized, another request, or a node where no card fits (decide says
// why) goes to decide.
func totalsFastPath(score func(capacity, left int64) float64) func(*Node, Request, *Workload) (Decision, bool) {
	return func(node *Node, req Request, _ *Workload) (Decision, bool) {
		s := &node.sum
		if !s.ok || len(req.Demands) != 1 || len(req.Models) != 0 || req.Cards != nil {
			return Decision{}, false
		}
		d := &req.Demands[0]
		if d.WholeCards > 0 || d.Units <= 0 || s.maxFree < d.Units {
			return Decision{}, false
		}
		return Decision{Node: node.Name, Fits: true, Score: score(s.capacity, s.free-d.Units)}, true
	}
}

// shareOf is the share of capacity that is allocated when left is free:
// 0 (empty) to 1 (full); 0 for no capacity.
func shareOf(capacity, left int64) float64 {
	if capacity == 0 {
		return 0
	}
	return float64(capacity-left) / float64(capacity)
}
