package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// Closed forms of the growth on nodes whose cards are alike (one model and
// capacity, the common case): a few lookups in per-workload cumulative
// tables instead of a pass over the classes (measure). They are what the
// fast path (fast.go) computes, earned by BenchmarkFragEvaluateAll and
// BenchmarkFGDEvaluateAll; decide's Score and FGD's card choice use them on
// the same nodes, so that both paths decide alike to the bit.
//
// For any node, frag = T·(noGPU + W) − Σ_c fit_c · U_c, with T the node's
// free units, W the GPU classes' weight, fit_c the part of class c's weight
// whose CPU and memory fit the node, and U_c the free units of the cards
// that can take c's per-card demand (0 when fewer than c's card count can).
// On an alike view, summed by card instead of by class, the share classes
// give Σ_i free_i · F(free_i), F(x) the fit weight of the share classes of
// at most x units that accept the cards' model, and the whole-card classes
// give full · capacity · (the fit weight of those asking for at most full
// cards), full the number of unused cards. A fitRow holds F and that last
// weight for one host state; a share changes one card, so the growth is a
// difference of two rows plus (f−u)·F(f−u) − f·F(f) (and one term more if
// the card was unused).

// fitRow is, for one model slot and one host state, what the closed forms
// read: share[k] is the fit weight of the first k share classes (by
// ascending units, ix.shareUnits) that accept the slot's model, whole[m]
// that of the whole-card classes accepting it that ask for at most m cards
// (m ≤ maxStackCards).
type fitRow struct {
	share []float64
	whole []float64
}

// maxFastClasses is how many share classes a rowBuf holds on the stack;
// larger workloads use heap buffers.
const maxFastClasses = 64

// rowBuf holds a fitRow computed for one node.
type rowBuf struct {
	share [maxFastClasses + 1]float64
	whole [maxStackCards + 1]float64
}

// tableRow returns the fitRow of slot for host from the index's tables:
// the cumulative weights when the host blocks no shape, a level table's
// row when one of its resources blocks none. ok is false when both may
// block (see computeRow).
func (ix *fragIndex) tableRow(slot int, host *allocator.HostResources) (r fitRow, ok bool) {
	switch {
	case host == nil || host.Fits(ix.maxHost):
		return fitRow{ix.shareCum[slot], ix.wholeCum[slot][:]}, true
	case len(ix.byCPU.share) > 0 && host.MemoryMiB >= ix.maxHost.MemoryMiB:
		r.share, r.whole = ix.byCPU.row(ix.byCPU.level(host.CPUMilli), slot)
		return r, true
	case len(ix.byMem.share) > 0 && host.CPUMilli >= ix.maxHost.CPUMilli:
		r.share, r.whole = ix.byMem.row(ix.byMem.level(host.MemoryMiB), slot)
		return r, true
	}
	return fitRow{}, false
}

// computeRow builds the fitRow of slot for host from the classes' host
// requests, in buf.
func (ix *fragIndex) computeRow(slot int, host *allocator.HostResources, buf *rowBuf) fitRow {
	r, k := buf.start(len(ix.shareUnits)), 0
	for i := range ix.classes {
		c := &ix.classes[i]
		fit := 0.0
		if c.accepts(slot, len(ix.models)) {
			fit = c.hostFitWeight(host)
		}
		k = r.addClass(c, k, fit)
	}
	return r.finish()
}

// start returns an empty row in buf (on the heap for workloads of more than
// maxFastClasses share classes) for ns share classes.
func (buf *rowBuf) start(ns int) fitRow {
	r := fitRow{whole: buf.whole[:]}
	if ns+1 <= len(buf.share) {
		r.share = buf.share[:ns+1]
	} else {
		r.share = make([]float64, ns+1)
	}
	r.share[0] = 0
	clear(r.whole)
	return r
}

// addClass adds class c with fit weight fit to a row being built, k share
// classes in, and returns the share classes now in; classes come in index
// order (share classes by ascending units).
func (r fitRow) addClass(c *fragClass, k int, fit float64) int {
	switch {
	case c.units > 0:
		r.share[k+1] = r.share[k] + fit
		return k + 1
	case c.count <= maxStackCards:
		r.whole[c.count] += fit
	}
	return k
}

// finish turns the whole-card weights by card count into cumulative ones.
func (r fitRow) finish() fitRow {
	for m := 1; m <= maxStackCards; m++ {
		r.whole[m] += r.whole[m-1]
	}
	return r
}

// alikeGrowthHosts is alikeGrowth on the alike cards v of model slot slot,
// with the rows of hosts hostB (before the pod) and hostA (after).
func (ix *fragIndex) alikeGrowthHosts(v alikeShares, slot int, hostB, hostA *allocator.HostResources, took bool, f, u int64) float64 {
	rb, okB := ix.tableRow(slot, hostB)
	ra, okA := ix.tableRow(slot, hostA)
	if !okB || !okA {
		var buf [2]rowBuf // declared here: most nodes need no computed row
		rb, ra = ix.computeMissing(slot, hostB, hostA, rb, okB, ra, okA, &buf)
	}
	return ix.alikeGrowth(v, rb, ra, took, f, u)
}

// computeMissing returns the rows of slot for the hosts before (hostB) and
// after (hostA) the pod, given what tableRow found (rb if okB, ra if okA):
// the missing ones are computed into buf (computeRow). Callers look the
// rows up first and declare buf only when one is missing: zeroing it for
// every node would cost more than the tables save.
func (ix *fragIndex) computeMissing(slot int, hostB, hostA *allocator.HostResources, rb fitRow, okB bool, ra fitRow, okA bool, buf *[2]rowBuf) (fitRow, fitRow) {
	if !okB {
		rb = ix.computeRow(slot, hostB, &buf[0])
	}
	if !okA {
		ra = ix.computeRow(slot, hostA, &buf[1])
	}
	return rb, ra
}

// alikeShares is alike cards as the closed forms read them: the free
// shares of the cards with any, in card order, how many of them are
// unused, and their capacity.
type alikeShares struct {
	free   []int64
	unused int
	cap0   int64
}

// alikeGrowth is frag after the pod minus frag before on the alike cards v
// of the before state, when the host goes from rb's state to ra's and, if
// took, u units are taken from a card with free f:
//
//	growth = −u·(noGPU + W) − (S_A − S_B), S = Σ_c fit_c · U_c,
//
// where S_A − S_B = [S(ra, before view) − S(rb, before view)] + the change
// of S(ra, ·) when the card goes from f to f−u free (takeDelta).
func (ix *fragIndex) alikeGrowth(v alikeShares, rb, ra fitRow, took bool, f, u int64) float64 {
	full := v.unused
	var dS float64
	if !sameRow(rb, ra) {
		for _, fi := range v.free {
			p := ix.sharesUpTo(fi)
			dS += float64(fi) * (ra.share[p] - rb.share[p])
		}
		dS += float64(int64(full)*v.cap0) * (ra.whole[full] - rb.whole[full])
	}
	if took {
		dS += ix.takeDelta(v.cap0, ra, full, f, u)
	}
	return (ix.noGPU+ix.gpuWeight)*float64(-u) - dS
}

// takeDelta is how S = Σ_c fit_c · U_c changes on alike cards of capacity
// cap0, full of which are unused, when u units are taken from a card with
// free f, fit weights from r: the share classes see the card go from f to
// f−u free, the whole-card classes lose an unused card if it was one.
func (ix *fragIndex) takeDelta(cap0 int64, r fitRow, full int, f, u int64) float64 {
	fa := f - u
	p, q := ix.sharesUpTo(fa), ix.sharesUpTo(f)
	d := float64(fa)*r.share[p] - float64(f)*r.share[q]
	if f >= cap0 && fa < cap0 {
		d += float64(int64(full-1)*cap0)*r.whole[full-1] - float64(int64(full)*cap0)*r.whole[full]
	}
	return d
}

// sharesUpTo is the number of share classes of at most x ≥ 0 units.
func (ix *fragIndex) sharesUpTo(x int64) int {
	if x < int64(len(ix.shareRank)) {
		return int(ix.shareRank[x])
	}
	if len(ix.shareRank) > 0 { // x is over the largest share
		return len(ix.shareUnits)
	}
	return countAtMost(ix.shareUnits, x)
}

// countAtMost is the number of entries of a, ascending, that are at most x.
// A binary search whose branches do not depend on x (a fixed number of
// halvings, the comparison a conditional move): on this path a mispredicted
// branch costs more than the search (BenchmarkFragEvaluateAll at 5,000
// nodes: sort.Search mispredicts ~15,000 more branches per call).
func countAtMost(a []int64, x int64) int {
	n := len(a)
	if n == 0 {
		return 0
	}
	// Entries before base are at most x, entries from base+n on exceed it.
	base := 0
	for n > 1 {
		half := n / 2
		base += half * atMost(a[base+half], x)
		n -= half
	}
	return base + atMost(a[base], x)
}

// atMost is 1 when y ≤ x, else 0 (compiled without a branch).
func atMost(y, x int64) int {
	if y <= x {
		return 1
	}
	return 0
}

// sameRow reports whether a and b are the same table row.
func sameRow(a, b fitRow) bool { return &a.share[0] == &b.share[0] && &a.whole[0] == &b.whole[0] }
