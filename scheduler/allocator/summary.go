package allocator

// A node's summary: the totals of its schedulable cards, kept beside the
// cards so that the policies whose share decision reads only totals
// (binpack, spread) decide the common request, one container asking for a
// share of one card with no model or card choice, without reading the
// cards. At 5,000 nodes × 8 cards the cards are 3.2 MB, beyond the L2
// cache: reading every card costs more than deciding. The summary is in
// the Node itself: 40 bytes of totals, and for the policies that read each
// card's free share (bestfit, frag, fgd) the free shares of up to
// AlikeShares alike cards with their model and capacity, 104 bytes more
// (Summary).

// AlikeShares is the most cards with free units whose shares a summary
// keeps (Summary.Shares).
const AlikeShares = 8

// Summary is the totals of a node's schedulable cards and, when the ones
// with free units are alike, their free shares: what the fast paths of the
// fragmentation-aware policies read instead of the cards.
//
// Worked example: cards of 80 units, A100, healthy, used 30, 80 (full), 0,
// and a fourth unhealthy: Cards 3, Capacity 240, Free 50+0+80 = 130,
// MaxFree 80, Alike (two cards with free units, both A100 of 80), Model
// "A100", CardCapacity 80, N 2, Shares [50 80].
type Summary struct {
	// Cards, Capacity, Free and MaxFree are the number of schedulable
	// cards, the sum of their Capacity, the sum of their Free() and the
	// largest Free().
	Cards                   int
	Capacity, Free, MaxFree int64
	// Alike is set when at least one schedulable card has free units, at
	// most AlikeShares do, and they all have one Model and one Capacity
	// (CardCapacity). Shares[:N] is then their Free(), in card order; N and
	// Shares are zero otherwise.
	Alike        bool
	Model        string
	CardCapacity int64
	N            int
	Shares       [AlikeShares]int64
}

// summary is a node's Summary and whether it is set.
type summary struct {
	// ok says the summary is set (Summarize) and may be read.
	ok bool
	Summary
}

// Summarize records in n the totals of its schedulable cards, which the
// fast paths of binpack and spread read instead of the cards, and their
// free shares when they are alike (Summary). Call it once n's cards and
// InventoryErr are final: the summary is not kept up to date, and a node
// changed after Summarize decides as the summary says. The extender's cache
// summarizes every snapshot it builds (it never changes one); a node never
// summarized is decided from its cards.
func (n *Node) Summarize() { n.sum = summary{ok: n.InventoryErr == nil, Summary: n.CardSummary()} }

// CardSummary is the Summary of n's cards as they are now, summarized or
// not: what a fast path reads on a node that no cache summarized.
func (n *Node) CardSummary() Summary {
	var s Summary
	alike := true
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Schedulable() {
			continue
		}
		f := c.Free()
		s.Cards++
		s.Capacity += c.Capacity
		s.Free += f
		s.MaxFree = max(s.MaxFree, f)
		if f == 0 || !alike {
			continue
		}
		switch {
		case s.N == 0:
			s.Model, s.CardCapacity = c.Model, c.Capacity
		case s.N == AlikeShares || c.Model != s.Model || c.Capacity != s.CardCapacity:
			alike = false
			continue
		}
		s.Shares[s.N] = f
		s.N++
	}
	if s.Alike = alike && s.N > 0; !s.Alike {
		s.Model, s.CardCapacity, s.N, s.Shares = "", 0, 0, [AlikeShares]int64{}
	}
	return s
}

// Summarized reports whether Summarize was called on n.
func (n *Node) Summarized() bool { return n.sum.ok }

// Summary returns what Summarize recorded, or nil for a node never
// summarized (or whose inventory could not be read), whose cards must be
// read instead. It is the node's own: like the rest of a snapshot, it is
// read, never changed.
func (n *Node) Summary() *Summary {
	if !n.sum.ok {
		return nil
	}
	return &n.sum.Summary
}

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
		if d.WholeCards > 0 || d.Units <= 0 || s.MaxFree < d.Units {
			return Decision{}, false
		}
		return Decision{Node: node.Name, Fits: true, Score: score(s.Capacity, s.Free-d.Units)}, true
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
