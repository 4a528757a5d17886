package allocator

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Card-aware preemption: which pods to evict from a node so that a pod of
// higher priority fits on its cards. kube-scheduler's own preemption
// reasons on node totals, so on a node whose cards are each partly used it
// may evict pods spread over several cards and still leave no card with
// the memory the preemptor needs. SelectVictims works on the cards.
//
// It follows kube-scheduler's SelectVictimsOnNode, with the policy's fit
// (Decide) in place of node totals: every pod of lower priority on the
// cards considered is removed; if the preemptor then fits, the pods are
// given back one at a time, the ones whose eviction would violate a
// PodDisruptionBudget first, then the others, each group the most
// important first (higher priority, then earlier start), and a pod stays a
// victim only when giving it back leaves the preemptor without a fit. Every
// victim is therefore needed: giving any one back breaks the fit.
//
// For a preemptor with one demand (one container's share, or one whole
// card) the cards are tried one at a time, so the victims are always pods
// on the one card the preemptor then gets; the best card wins by
// kube-scheduler's own order between nodes (pickOneNodeForPreemption):
// fewest budget violations, lowest priority of the most important victim,
// smallest sum of priorities, fewest victims, then the least memory freed
// and the lower card index.
// A preemptor with several demands (containers, or several whole cards) is
// weighed on the whole node at once.

// Resident is a pod that holds units on a node's cards, as preemption
// weighs it.
type Resident struct {
	// ID identifies the pod (its UID); Victims returns it as is.
	ID string
	// Priority is the pod's priority; only pods below the preemptor's are
	// ever victims.
	Priority int32
	// Started orders pods of equal priority: the earlier one (smaller) is
	// the more important, kept first (kube-scheduler's MoreImportantPod).
	Started int64
	// Grants are the units the pod holds, by card Index; a grant with Whole
	// holds the card whole.
	Grants []Grant
	// Budgets are the positions in Preemption.Budgets of the disruption
	// budgets that cover the pod.
	Budgets []int
	// Protected marks a pod that may not be evicted at all (e.g. one whose
	// priority is unknown, or an assumed pod not yet bound).
	Protected bool
}

// Preemption is SelectVictims's input: one node, the pods on it and the
// preemptor.
type Preemption struct {
	Node      *Node
	Residents []Resident
	// Budgets are the disruptions each budget still allows (a
	// PodDisruptionBudget's status.disruptionsAllowed).
	Budgets  []int32
	Request  Request
	Priority int32
	Workload *Workload
}

// Victims is the answer for one node.
type Victims struct {
	// IDs are the victims' Resident.IDs, the most important first.
	IDs []string
	// PDBViolations counts the victims whose eviction violates a budget.
	PDBViolations int
	// Placements are where the preemptor goes once the victims are gone
	// (Decision.Placements).
	Placements []Placement
	// maxPriority, sumPriority and freed (the victims' units, a card held
	// whole counting its capacity) rank answers (see better).
	maxPriority int32
	sumPriority int64
	freed       int64
}

// Cards returns the card indexes the preemptor gets, ascending.
func (v Victims) Cards() []int {
	var out []int
	for _, p := range v.Placements {
		for _, g := range p.Grants {
			if !slices.Contains(out, g.Card) {
				out = append(out, g.Card)
			}
		}
	}
	slices.Sort(out)
	return out
}

// SelectVictims returns the victims that make in.Request fit on in.Node,
// or ok false and the reason no eviction does. A node where the preemptor
// fits already has no victims to give: it is not a preemption candidate
// either (kube-scheduler requires at least one victim per node).
func (p *Policy) SelectVictims(in Preemption) (v Victims, ok bool, why string) {
	if d := p.Decide(in.Node, in.Request, in.Workload); d.Fits {
		return Victims{}, false, "the pod fits without evicting anything"
	}
	lower := make([]int, 0, len(in.Residents))
	for i, r := range in.Residents {
		if !r.Protected && r.Priority < in.Priority && len(r.Grants) > 0 {
			lower = append(lower, i)
		}
	}
	if len(lower) == 0 {
		return Victims{}, false, fmt.Sprintf("no pod on node %s's cards has a priority below %d", in.Node.Name, in.Priority)
	}
	// Most important first (kube-scheduler's MoreImportantPod).
	slices.SortFunc(lower, func(a, b int) int {
		ra, rb := &in.Residents[a], &in.Residents[b]
		if c := cmp.Compare(rb.Priority, ra.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(ra.Started, rb.Started); c != 0 {
			return c
		}
		return cmp.Compare(ra.ID, rb.ID)
	})
	var groups [][]int
	if len(in.Request.Demands) == 1 && in.Request.Demands[0].WholeCards <= 1 {
		for _, c := range in.Node.Cards {
			var g []int
			for _, i := range lower {
				if holds(in.Residents[i], c.Index) {
					g = append(g, i)
				}
			}
			if len(g) > 0 {
				groups = append(groups, g)
			}
		}
	} else {
		groups = [][]int{lower}
	}
	found := false
	for _, g := range groups {
		if cand, fits := p.reprieve(in, g); fits && (!found || better(cand, v)) {
			v, found = cand, true
		}
	}
	if !found {
		return Victims{}, false, fmt.Sprintf("evicting every pod of priority below %d from one of node %s's cards leaves no room", in.Priority, in.Node.Name)
	}
	return v, true, ""
}

// holds reports whether r holds units on the card with Index card.
func holds(r Resident, card int) bool {
	for _, g := range r.Grants {
		if g.Card == card {
			return true
		}
	}
	return false
}

// reprieve is kube-scheduler's reprieve on the potential victims group
// (positions in in.Residents, the most important first).
func (p *Policy) reprieve(in Preemption, group []int) (Victims, bool) {
	removed := make(map[int]bool, len(group))
	for _, i := range group {
		removed[i] = true
	}
	if _, fits := p.fitsWithout(in, removed); !fits {
		return Victims{}, false
	}
	// Which potential victims a budget protects: each covered pod takes one
	// of the budget's allowed disruptions, the most important first.
	allowed := slices.Clone(in.Budgets)
	var violating, other []int
	for _, i := range group {
		viol := false
		for _, b := range in.Residents[i].Budgets {
			if b >= 0 && b < len(allowed) {
				allowed[b]--
				viol = viol || allowed[b] < 0
			}
		}
		if viol {
			violating = append(violating, i)
		} else {
			other = append(other, i)
		}
	}
	var v Victims
	keep := func(i int, viol bool) {
		removed[i] = false
		if _, fits := p.fitsWithout(in, removed); fits {
			return
		}
		removed[i] = true
		r := in.Residents[i]
		v.IDs = append(v.IDs, r.ID)
		if viol {
			v.PDBViolations++
		}
		if len(v.IDs) == 1 || r.Priority > v.maxPriority {
			v.maxPriority = r.Priority
		}
		v.sumPriority += int64(r.Priority) + math.MaxInt32 + 1
		for _, g := range r.Grants {
			v.freed += g.Units
			if g.Whole {
				for _, c := range in.Node.Cards {
					if c.Index == g.Card {
						v.freed += c.Capacity
					}
				}
			}
		}
	}
	for _, i := range violating {
		keep(i, true)
	}
	for _, i := range other {
		keep(i, false)
	}
	if len(v.IDs) == 0 {
		return Victims{}, false
	}
	d, _ := p.fitsWithout(in, removed)
	v.Placements = d.Placements
	return v, true
}

// fitsWithout decides the request on a copy of the node without the
// residents removed marks.
func (p *Policy) fitsWithout(in Preemption, removed map[int]bool) (Decision, bool) {
	n := *in.Node
	n.Cards = slices.Clone(in.Node.Cards)
	for i, r := range in.Residents {
		if !removed[i] {
			continue
		}
		for _, g := range r.Grants {
			for k := range n.Cards {
				c := &n.Cards[k]
				if c.Index != g.Card {
					continue
				}
				if g.Whole {
					c.Whole = wholeHeld(in.Residents, removed, g.Card)
				} else {
					c.Used = max(c.Used-g.Units, 0)
				}
			}
		}
	}
	n.Summarize()
	d := p.Decide(&n, in.Request, in.Workload)
	return d, d.Fits
}

// wholeHeld reports whether a resident not removed still holds card whole.
func wholeHeld(rs []Resident, removed map[int]bool, card int) bool {
	for i, r := range rs {
		if removed[i] {
			continue
		}
		for _, g := range r.Grants {
			if g.Whole && g.Card == card {
				return true
			}
		}
	}
	return false
}

// better reports whether a beats b in kube-scheduler's order between
// preemption candidates: fewer budget violations, a lower most important
// victim, a smaller sum of priorities, fewer victims; then less memory
// freed (a pod holding two cards is not evicted for one).
func better(a, b Victims) bool {
	switch {
	case a.PDBViolations != b.PDBViolations:
		return a.PDBViolations < b.PDBViolations
	case a.maxPriority != b.maxPriority:
		return a.maxPriority < b.maxPriority
	case a.sumPriority != b.sumPriority:
		return a.sumPriority < b.sumPriority
	case len(a.IDs) != len(b.IDs):
		return len(a.IDs) < len(b.IDs)
	}
	return a.freed < b.freed
}

// Hold returns a copy of node with held added: units a promise keeps for a
// preemptor on its cards (by Index; a Whole grant holds the card whole).
// It only ever adds use, never frees any. The copy is summarized.
func Hold(node *Node, held []Grant) *Node {
	n := *node
	n.Cards = slices.Clone(node.Cards)
	for _, g := range held {
		for k := range n.Cards {
			if c := &n.Cards[k]; c.Index == g.Card {
				if g.Whole {
					c.Whole = true
				} else {
					c.Used += g.Units
				}
			}
		}
	}
	n.Summarize()
	return &n
}

// Only returns a copy of node where every card but those listed (by Index)
// is unusable: the preemptor decides on the cards its victims free. The
// copy is summarized.
func Only(node *Node, cards []int) *Node {
	n := *node
	n.Cards = slices.Clone(node.Cards)
	for k := range n.Cards {
		if c := &n.Cards[k]; !slices.Contains(cards, c.Index) {
			c.Used = c.Capacity
		}
	}
	n.Summarize()
	return &n
}
