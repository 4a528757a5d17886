package allocator

import (
	"cmp"
	"fmt"
	"slices"
)

// decide places req on node. scratch, when it has room for the node's
// cards, holds the free units the policy works on; the policy never keeps it.
func (p *Policy) decide(node *Node, req Request, w *Workload, wantPlacements bool, scratch []int64) Decision {
	d := Decision{Node: node.Name}
	if node.InventoryErr != nil {
		d.Reasons = []Reason{{Code: ReasonNoInventory, Message: fmt.Sprintf("GPU inventory unusable: %v", node.InventoryErr)}}
		return d
	}
	free := scratch[:0]
	if len(node.Cards) > cap(scratch) {
		free = make([]int64, 0, len(node.Cards))
	}
	for i := range node.Cards {
		// By pointer: a Card is 80 bytes, and this loop runs for every
		// card of every candidate node.
		if c := &node.Cards[i]; c.Schedulable() && (len(req.Models) == 0 || usable(*c, req.Models)) && (req.Cards == nil || req.Cards.Allows(c)) {
			free = append(free, c.Free())
		} else {
			free = append(free, Unusable)
		}
	}
	var orderBuf [8]int
	order := orderBuf[:0]
	if len(req.Demands) > len(orderBuf) {
		order = make([]int, 0, len(req.Demands))
	}
	order = hardestFirst(req.Demands, order)
	if wantPlacements {
		d.Placements = make([]Placement, len(req.Demands))
	}
	for _, di := range order {
		dm := req.Demands[di]
		var grants []Grant
		switch {
		case dm.WholeCards > 0:
			for k := 0; k < dm.WholeCards; k++ {
				i := p.ChooseCard(node, free, dm, w)
				if i < 0 {
					d.Reasons = []Reason{wholeReason(node, free, dm, req, k)}
					d.Placements = nil
					return d
				}
				if wantPlacements {
					grants = append(grants, Grant{Card: node.Cards[i].Index, Units: node.Cards[i].Capacity, Whole: true})
				}
				free[i] = TakenWhole
			}
		case dm.Units > 0:
			i := p.ChooseCard(node, free, dm, w)
			if i < 0 {
				d.Reasons = []Reason{shareReason(node, free, dm, req)}
				d.Placements = nil
				return d
			}
			free[i] -= dm.Units
			if wantPlacements {
				grants = []Grant{{Card: node.Cards[i].Index, Units: dm.Units}}
			}
		default:
			d.Reasons = []Reason{{Code: ReasonInvalidDemand, Container: dm.Container,
				Message: fmt.Sprintf("container %q asks for %d units, want at least 1", dm.Container, dm.Units)}}
			d.Placements = nil
			return d
		}
		if wantPlacements {
			d.Placements[di] = Placement{Container: dm.Container, Grants: grants}
		}
	}
	d.Fits = true
	d.Score = p.Score(node, free, req, w)
	return d
}

// hardestFirst appends to order the positions of demands in the order they
// are placed, hardest first: whole-card demands by count, then shares by
// size (Units), the largest first; equal demands keep the pod's order.
//
// Ties broken by position make this a total order, so any sort gives the
// same result as a stable one: slices.SortFunc (pattern-defeating quicksort,
// insertion sort below 12 elements) is O(n log n) in the pod's containers
// and allocates nothing. Worked example: units [4, 8, 4] and a demand of 2
// whole cards last → order [3, 1, 0, 2].
func hardestFirst(demands []Demand, order []int) []int {
	for i := range demands {
		order = append(order, i)
	}
	if len(order) > 1 {
		slices.SortFunc(order, func(a, b int) int {
			da, db := &demands[a], &demands[b]
			if da.WholeCards != db.WholeCards {
				return cmp.Compare(db.WholeCards, da.WholeCards)
			}
			if da.Units != db.Units {
				return cmp.Compare(db.Units, da.Units)
			}
			return cmp.Compare(a, b)
		})
	}
	return order
}
