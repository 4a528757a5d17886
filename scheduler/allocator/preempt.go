package allocator

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Card-aware preemption (docs/design.md, "Preemption"): which pods to evict
// from a node so that a pod of higher priority fits on its cards, where
// kube-scheduler's own preemption reasons on node totals. SelectVictims
// follows kube-scheduler's SelectVictimsOnNode with the policy's fit
// (Decide): every lower-priority pod on the cards considered is removed, then
// given back one at a time (PodDisruptionBudget violators first, each group
// most important first), staying a victim only if the preemptor needs it
// gone. A preemptor with one demand tries the cards one at a time, ranked as
// pickOneNodeForPreemption ranks nodes, then by least memory freed and lower
// card index; one with several demands is weighed on the whole node.

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
	s := newSearch(p, &in)
	if s.fits() {
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
	var best []int
	found := false
	for _, g := range groups {
		if cand, ids, fits := s.reprieve(g); fits && (!found || better(cand, v)) {
			v, best, found = cand, ids, true
		}
	}
	if !found {
		return Victims{}, false, fmt.Sprintf("evicting every pod of priority below %d from one of node %s's cards leaves no room", in.Priority, in.Node.Name)
	}
	clear(s.removed)
	for _, i := range best {
		s.removed[i] = true
	}
	s.apply()
	v.Placements = p.Decide(&s.node, in.Request, in.Workload).Placements
	return v, true, ""
}

// holds reports whether r holds units on the card with Index card.
func holds(r Resident, card int) bool {
	return slices.ContainsFunc(r.Grants, func(g Grant) bool { return g.Card == card })
}

// search is SelectVictims's scratch space: one copy of the node whose
// cards fits rebuilds for every set of removed residents, without
// allocating.
type search struct {
	p       *Policy
	in      *Preemption
	node    Node
	removed []bool
	free    []int64
	order   []int
}

func newSearch(p *Policy, in *Preemption) *search {
	s := &search{p: p, in: in, node: *in.Node, removed: make([]bool, len(in.Residents)),
		free: make([]int64, 0, len(in.Node.Cards)), order: make([]int, 0, len(in.Request.Demands))}
	s.node.Cards = slices.Clone(in.Node.Cards)
	return s
}

// reprieve is kube-scheduler's reprieve on the potential victims group
// (positions in the residents, the most important first). It returns the
// victims' positions too.
func (s *search) reprieve(group []int) (Victims, []int, bool) {
	in := s.in
	clear(s.removed)
	for _, i := range group {
		s.removed[i] = true
	}
	if !s.fits() {
		return Victims{}, nil, false
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
	var ids []int
	keep := func(i int, viol bool) {
		s.removed[i] = false
		if s.fits() {
			return
		}
		s.removed[i] = true
		r := in.Residents[i]
		ids = append(ids, i)
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
				if k := cardPos(in.Node, g.Card); k >= 0 {
					v.freed += in.Node.Cards[k].Capacity
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
		return Victims{}, nil, false
	}
	return v, ids, true
}

// cardPos is the position in node.Cards of the card with Index index, or -1.
func cardPos(node *Node, index int) int {
	for k := range node.Cards {
		if node.Cards[k].Index == index {
			return k
		}
	}
	return -1
}

// apply sets the scratch node to the snapshot without the removed
// residents' grants.
func (s *search) apply() {
	copy(s.node.Cards, s.in.Node.Cards)
	// Shares are subtracted; a card held whole is released once every
	// resident holding it whole is removed.
	for i, r := range s.in.Residents {
		if !s.removed[i] {
			continue
		}
		for _, g := range r.Grants {
			if k := cardPos(&s.node, g.Card); k >= 0 {
				if g.Whole {
					s.node.Cards[k].Whole = false
				} else {
					s.node.Cards[k].Used = max(s.node.Cards[k].Used-g.Units, 0)
				}
			}
		}
	}
	for i, r := range s.in.Residents {
		if s.removed[i] {
			continue
		}
		for _, g := range r.Grants {
			if k := cardPos(&s.node, g.Card); g.Whole && k >= 0 {
				s.node.Cards[k].Whole = true
			}
		}
	}
	s.node.Summarize()
}

// fits reports whether the request can be placed on the scratch node with
// the removed residents gone: the decision core's card choice
// (Policy.ChooseCard, hardest demand first), without its reasons and score.
func (s *search) fits() bool {
	s.apply()
	n, req := &s.node, s.in.Request
	if n.InventoryErr != nil {
		return false
	}
	free := s.free[:0]
	for i := range n.Cards {
		if c := &n.Cards[i]; usable(*c, req.Models) && (req.Cards == nil || req.Cards.Allows(c)) {
			free = append(free, c.Free())
		} else {
			free = append(free, Unusable)
		}
	}
	s.order = hardestFirst(req.Demands, s.order[:0])
	for _, di := range s.order {
		dm := req.Demands[di]
		switch {
		case dm.WholeCards > 0:
			for k := 0; k < dm.WholeCards; k++ {
				i := s.p.ChooseCard(n, free, dm, s.in.Workload)
				if i < 0 {
					return false
				}
				free[i] = TakenWhole
			}
		case dm.Units > 0:
			i := s.p.ChooseCard(n, free, dm, s.in.Workload)
			if i < 0 {
				return false
			}
			free[i] -= dm.Units
		default:
			return false
		}
	}
	return true
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
