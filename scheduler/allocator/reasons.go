package allocator

import (
	"fmt"
	"strings"

	"github.com/gpushare/gpushare/api"
)

// census counts the cards a demand cannot use, by why.
type census struct{ unhealthy, isolated, wrongModel int }

// excludes reports whether the demand cannot use card c (not schedulable,
// or not of the pod's models or choice), counting it.
func (cs *census) excludes(c Card, req Request) bool {
	switch {
	case !c.Schedulable():
		if c.State == api.CardIsolated {
			cs.isolated++
		} else {
			cs.unhealthy++
		}
		return true
	case !usable(c, req.Models) || !req.Cards.Allows(&c):
		cs.wrongModel++
		return true
	}
	return false
}

// shareReason says why no card can take a share demand.
func shareReason(node *Node, free []int64, dm Demand, req Request) Reason {
	if r, ok := cardChoiceReason(node, dm, req); ok {
		return r
	}
	var (
		usableCards     int
		cs              census
		maxCap, maxFree int64
		maxFreeCard     = -1
		// takenWhole: cards this pod's whole-card containers took.
		takenWhole int
	)
	for i, c := range node.Cards {
		if cs.excludes(c, req) {
			continue
		}
		if free[i] == TakenWhole {
			takenWhole++
			continue
		}
		usableCards++
		if c.Capacity > maxCap {
			maxCap = c.Capacity
		}
		if free[i] > maxFree || maxFreeCard < 0 {
			maxFree, maxFreeCard = free[i], c.Index
		}
	}
	want := quantity(dm.Units, node.Unit)
	if usableCards == 0 && takenWhole > 0 {
		return Reason{Code: ReasonMoreCardsThanNode, Container: dm.Container,
			Message: fmt.Sprintf("no card left for container %q: the pod's whole-card containers take all %d usable cards", dm.Container, takenWhole)}
	}
	if usableCards == 0 {
		return Reason{Code: ReasonNoSchedulableCard, Container: dm.Container,
			Message: fmt.Sprintf("no schedulable GPU for container %q (%s)", dm.Container, cs.describe(len(node.Cards), req))}
	}
	// With a card choice, say that only the chosen cards were looked at:
	// "no single card of those the pod chose (card-models "H100") has …".
	chosen := "card"
	if req.Cards != nil {
		chosen = fmt.Sprintf("card of those the pod chose (%s)", req.Cards.choice.String())
	}
	if dm.Units > maxCap {
		return Reason{Code: ReasonLargerThanAnyCard, Container: dm.Container,
			Message: fmt.Sprintf("container %q asks for %s, more than any %s holds (largest is %s)", dm.Container, want, chosen, quantity(maxCap, node.Unit))}
	}
	if maxFree < 0 {
		maxFree = 0
	}
	msg := fmt.Sprintf("no single %s has %s free for container %q; largest free is %s on card %d", chosen, want, dm.Container, quantity(maxFree, node.Unit), maxFreeCard)
	if takenWhole > 0 {
		msg += fmt.Sprintf(" (%d more taken whole by this pod)", takenWhole)
	}
	return Reason{Code: ReasonInsufficientFree, Container: dm.Container, Message: msg}
}

// wholeReason says why the node cannot give demand dm its whole cards; got
// is how many of them this demand already took. When the node has fewer
// usable cards than the pod's whole-card demands ask for in all, no
// preemption helps (ReasonMoreCardsThanNode); otherwise the cards are in use
// (ReasonNotEnoughWholeCards), and the reason says by what.
//
// Worked example: 4 healthy cards, one holding shared memory, one given whole
// to another pod, a demand of 3: "container "train" needs 3 free whole cards;
// node has 2 (of 4 usable: 1 with shared memory, 1 held whole)".
func wholeReason(node *Node, free []int64, dm Demand, req Request, got int) Reason {
	if r, ok := cardChoiceReason(node, dm, req); ok {
		return r
	}
	var usableCards, shared, heldWhole int
	var cs census
	free0 := got
	for i, c := range node.Cards {
		if cs.excludes(c, req) {
			continue
		}
		usableCards++
		switch {
		case c.Whole:
			heldWhole++
		case c.Used > 0:
			shared++
		case CanTakeWhole(node, free, i):
			free0++
		}
	}
	total := 0
	for _, d := range req.Demands {
		total += d.WholeCards
	}
	if usableCards == 0 {
		return Reason{Code: ReasonNoSchedulableCard, Container: dm.Container,
			Message: fmt.Sprintf("no schedulable GPU for container %q (%s)", dm.Container, cs.describe(len(node.Cards), req))}
	}
	if total > usableCards {
		return Reason{Code: ReasonMoreCardsThanNode, Container: dm.Container,
			Message: fmt.Sprintf("the pod asks for %d whole cards, more than the node's %d usable cards", total, usableCards)}
	}
	var busy []string
	if shared > 0 {
		busy = append(busy, fmt.Sprintf("%d with shared memory", shared))
	}
	if heldWhole > 0 {
		busy = append(busy, fmt.Sprintf("%d held whole", heldWhole))
	}
	if taken := usableCards - shared - heldWhole - free0; taken > 0 {
		busy = append(busy, fmt.Sprintf("%d taken by this pod's other containers", taken))
	}
	detail := ""
	if len(busy) > 0 {
		detail = fmt.Sprintf(" (of %d usable: %s)", usableCards, strings.Join(busy, ", "))
	}
	return Reason{Code: ReasonNotEnoughWholeCards, Container: dm.Container,
		Message: fmt.Sprintf("container %q needs %d free whole cards; node has %d%s", dm.Container, dm.WholeCards, free0, detail)}
}

// describe says, in words, what the census counted of the node's total
// cards (e.g. "4 cards: 1 unhealthy, 3 not of model T4").
func (cs census) describe(total int, req Request) string {
	unhealthy, isolated, wrongModel := cs.unhealthy, cs.isolated, cs.wrongModel
	if total == 0 {
		return "the node has no GPU cards"
	}
	var parts []string
	if unhealthy > 0 {
		parts = append(parts, fmt.Sprintf("%d unhealthy", unhealthy))
	}
	if isolated > 0 {
		parts = append(parts, fmt.Sprintf("%d isolated", isolated))
	}
	if wrongModel > 0 {
		switch {
		case req.Cards == nil:
			parts = append(parts, fmt.Sprintf("%d not of model %s", wrongModel, strings.Join(req.Models, "|")))
		case len(req.Models) == 0:
			parts = append(parts, fmt.Sprintf("%d not chosen by the pod (%s)", wrongModel, req.Cards.choice.String()))
		default:
			parts = append(parts, fmt.Sprintf("%d not of model %s or not chosen by the pod (%s)", wrongModel, strings.Join(req.Models, "|"), req.Cards.choice.String()))
		}
	}
	return fmt.Sprintf("%d cards: %s", total, strings.Join(parts, ", "))
}
