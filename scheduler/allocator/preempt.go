package allocator

import (
	"cmp"
	"math"
)

// Holder is a pod that holds units on a node's cards and that preemption may
// evict: a potential victim.
type Holder struct {
	// ID names the pod to the caller (the extender uses its UID).
	ID string
	// Priority is the pod's priority; every holder has less than the
	// preemptor.
	Priority int32
	// ViolatesPDB: evicting this pod would violate a PodDisruptionBudget
	// (the caller decides, in kube-scheduler's order).
	ViolatesPDB bool
	// Grants are the pod's units per card (Grant.Card is the card's Index),
	// whole cards marked Whole.
	Grants []Grant
}

// Victims is the pods a preemption evicts on one node.
type Victims struct {
	// Holders are positions in the holders Preempt was given, in that order.
	Holders []int
	// Violations is how many of them violate a PodDisruptionBudget.
	Violations int
	// Placements are where the preemptor goes once they are gone: the cards
	// their eviction frees.
	Placements []Placement
}

// Preempt chooses which holders to evict from node so that req fits on
// node's cards, the way kube-scheduler's default preemption chooses on a
// node's totals (SelectVictimsOnNode), but card by card.
//
// holders must be listed most important first (higher priority, then
// earlier start), as kube-scheduler sorts them. For every card some holder
// uses, and once for the whole node when req needs several cards (or no
// card alone helps), Preempt removes the holders on it,
// checks that req then fits, and gives back as many as still let it fit:
// first those whose eviction would violate a PodDisruptionBudget, then the
// others, most important first. Each group's victims are necessary: none
// can be given back. Of the groups that help it returns the one kube-scheduler
// would prefer between nodes (pickOneNodeForPreemption): fewest budget
// violations, then the lowest highest priority, then the lowest sum of
// priorities, then the fewest pods. A share request thus evicts pods of one
// card only; whole-card and several-card requests may take pods of several
// cards (the whole-node group). ok is false when no group helps: even with
// every holder gone req does not fit.
//
// Worked example: four cards of 40 units, each with five holders of 8 units
// (priority 0) and 0 free; req 40 units. Every single-card group frees one
// card with five victims; the whole-node group also ends with one card's
// five (the others are given back). All tie, and the first card's group is
// returned: five victims, all on card 0.
func (p *Policy) Preempt(node *Node, req Request, w *Workload, holders []Holder) (v Victims, ok bool) {
	if node == nil || node.InventoryErr != nil || len(holders) == 0 {
		return Victims{}, false
	}
	cards := make([]Card, len(node.Cards))
	trial := *node
	trial.Cards = cards
	pos := make(map[int]int, len(node.Cards))
	for i, c := range node.Cards {
		pos[c.Index] = i
	}
	// fits reports whether req fits with the holders marked out gone.
	out := make([]bool, len(holders))
	fits := func() bool {
		copy(cards, node.Cards)
		for h, gone := range out {
			if !gone {
				continue
			}
			for _, g := range holders[h].Grants {
				i, known := pos[g.Card]
				if !known {
					continue
				}
				if g.Whole {
					cards[i].Whole = false
				} else {
					cards[i].Used -= g.Units
				}
			}
		}
		trial.Summarize()
		return p.Evaluate(&trial, req, w).Fits
	}
	best := Victims{}
	var bestKey victimKey
	found := false
	try := func(in func(h Holder) bool) {
		for h := range holders {
			out[h] = in(holders[h])
		}
		if !fits() {
			return
		}
		var cand Victims
		for _, pdb := range []bool{true, false} {
			for h := range holders {
				if !out[h] || holders[h].ViolatesPDB != pdb {
					continue
				}
				out[h] = false
				if !fits() {
					out[h] = true
				}
			}
		}
		for h := range holders {
			if out[h] {
				cand.Holders = append(cand.Holders, h)
				if holders[h].ViolatesPDB {
					cand.Violations++
				}
			}
		}
		key := keyOf(holders, cand)
		if !found || key.less(bestKey) {
			best, bestKey, found = cand, key, true
		}
	}
	seen := map[int]bool{}
	for _, h := range holders {
		for _, g := range h.Grants {
			if seen[g.Card] {
				continue
			}
			seen[g.Card] = true
			card := g.Card
			try(func(h Holder) bool { return h.uses(card) })
		}
	}
	if !found || !oneCard(req) {
		// Several cards needed (or no card alone frees enough): the node
		// as a whole.
		try(func(Holder) bool { return true })
	}
	if !found {
		return Victims{}, false
	}
	for h := range out {
		out[h] = false
	}
	for _, h := range best.Holders {
		out[h] = true
	}
	fits()
	best.Placements = p.Decide(&trial, req, w).Placements
	return best, true
}

// oneCard reports whether req needs a single card: one share, or one whole
// card. The single-card groups then contain the best answer.
func oneCard(req Request) bool {
	return len(req.Demands) == 1 && req.Demands[0].WholeCards <= 1
}

func (h Holder) uses(card int) bool {
	for _, g := range h.Grants {
		if g.Card == card {
			return true
		}
	}
	return false
}

// victimKey orders victim sets as kube-scheduler orders candidate nodes.
type victimKey struct {
	violations int
	highest    int64
	sum        int64
	pods       int
}

func keyOf(holders []Holder, v Victims) victimKey {
	k := victimKey{violations: v.Violations, highest: math.MinInt64, pods: len(v.Holders)}
	for _, h := range v.Holders {
		pr := int64(holders[h].Priority)
		k.highest = max(k.highest, pr)
		// As kube-scheduler sums them: each priority shifted to be positive.
		k.sum += pr + math.MaxInt32 + 1
	}
	return k
}

func (k victimKey) less(o victimKey) bool {
	if c := cmp.Compare(k.violations, o.violations); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(k.highest, o.highest); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(k.sum, o.sum); c != 0 {
		return c < 0
	}
	return k.pods < o.pods
}
