package inspect

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// suggestPolicy decides fit for Suggest. Whether a pod fits a node is the
// same under every policy (they differ in which card and node they prefer),
// so the simplest one is used.
const suggestPolicy = "bestfit"

// Suggest finds the smallest change that would give a pod its GPU memory,
// on the nodes of the snapshot (those that take new pods; v gives the pods
// holding each card). It is a pure function. In order:
//   - a node where the pod fits now: ChangeNone (the wait is elsewhere);
//   - the node needing the least memory freed (ties: the first by name):
//     ChangeFree. For a pod with one container asking for a share this is
//     exact: the card whose free memory is closest to the request, and the
//     difference. Otherwise it empties the pod's usable cards from the least
//     loaded up until the pod fits, so it is one small change, not always
//     the smallest;
//   - no node fits even with its cards emptied: ChangeNoCard.
//
// Worked example: a pod asks 20 on one card; node a's cards of 40 have 38
// and 24 allocated (free 2 and 16): freeing 4 on card 1 places it.
func Suggest(nodes []*allocator.Node, v View, req allocator.Request) Change {
	policy, err := registry.Lookup(suggestPolicy)
	if err != nil {
		return Change{Kind: ChangeNoCard, Message: err.Error()}
	}
	for _, n := range nodes {
		if d := policy.Decide(n, req, nil); d.Fits {
			cards := placedCards(d)
			return Change{Kind: ChangeNone, Node: n.Name, Cards: cards, Unit: n.Unit,
				Message: fmt.Sprintf("the GPU memory is free now on %s (%s): the pod waits for something else (see the scheduler's message), or for the scheduler to retry",
					n.Name, cardList(cards))}
		}
	}
	var best *Change
	for _, n := range nodes {
		c, ok := cheapest(policy, n, req)
		if ok && (best == nil || c.Units < best.Units) {
			best = &c
		}
	}
	if best == nil {
		return Change{Kind: ChangeNoCard, Message: noCard(nodes, req)}
	}
	best.Holders = holders(v, best.Node, best.Cards)
	held := ""
	if len(best.Holders) > 0 {
		held = " (held by " + strings.Join(best.Holders, ", ") + ")"
	}
	best.Message = fmt.Sprintf("would fit on %s if %d %s were freed on %s%s", best.Node, best.Units, best.Unit, cardList(best.Cards), held)
	return *best
}

// cheapest is the least memory to free on n for req to fit, and where.
func cheapest(policy *allocator.Policy, n *allocator.Node, req allocator.Request) (Change, bool) {
	usable := func(c *allocator.Card) bool { return c.Schedulable() && req.Cards.Allows(c) }
	if len(req.Demands) == 1 && req.Demands[0].Units > 0 {
		units := req.Demands[0].Units
		found := false
		var ch Change
		for i := range n.Cards {
			c := &n.Cards[i]
			if !usable(c) || c.Capacity < units {
				continue
			}
			if need := units - c.Free(); !found || need < ch.Units {
				ch, found = Change{Kind: ChangeFree, Node: n.Name, Cards: []int{c.Index}, Units: need, Unit: n.Unit}, true
			}
		}
		return ch, found
	}
	var order []int
	for i := range n.Cards {
		if usable(&n.Cards[i]) {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return n.Cards[order[a]].Used < n.Cards[order[b]].Used })
	trial := &allocator.Node{Name: n.Name, Unit: n.Unit, Cards: append([]allocator.Card(nil), n.Cards...)}
	ch := Change{Kind: ChangeFree, Node: n.Name, Unit: n.Unit}
	for _, i := range order {
		c := &trial.Cards[i]
		if c.Used > 0 {
			ch.Units += c.Used
			ch.Cards = append(ch.Cards, c.Index)
		}
		c.Used, c.Whole = 0, false
		if policy.Decide(trial, req, nil).Fits {
			sort.Ints(ch.Cards)
			return ch, true
		}
	}
	return Change{}, false
}

// noCard says why no node would take the pod even with its cards emptied.
func noCard(nodes []*allocator.Node, req allocator.Request) string {
	var largest int64
	var unit string
	most := 0
	for _, n := range nodes {
		usable := 0
		for i := range n.Cards {
			c := &n.Cards[i]
			if c.Schedulable() && req.Cards.Allows(c) {
				usable++
				if c.Capacity > largest {
					largest, unit = c.Capacity, string(n.Unit)
				}
			}
		}
		most = max(most, usable)
	}
	if most == 0 {
		return "no card it may use: no node that takes new pods has a healthy card of the models or UUIDs it chose"
	}
	var units int64
	whole := 0
	for _, d := range req.Demands {
		units = max(units, d.Units)
		whole += d.WholeCards
	}
	if units > largest {
		return fmt.Sprintf("no card of that size: the largest card it may use has %d %s", largest, unit)
	}
	if whole > 0 {
		return fmt.Sprintf("no node has enough cards: it asks for %s, a node that takes new pods has at most %s it may use", plural(whole, "whole card"), plural(most, "card"))
	}
	return fmt.Sprintf("no node has enough cards of that size it may use, even with every card emptied (at most %s per node)", plural(most, "card"))
}

// placedCards are the card indexes of a fitting decision's placements.
func placedCards(d allocator.Decision) []int {
	seen := map[int]bool{}
	var out []int
	for _, p := range d.Placements {
		for _, g := range p.Grants {
			if !seen[g.Card] {
				seen[g.Card] = true
				out = append(out, g.Card)
			}
		}
	}
	sort.Ints(out)
	return out
}

// holders are the pods on the given cards of node in v, "namespace/name",
// sorted, each once.
func holders(v View, node string, cards []int) []string {
	want := map[int]bool{}
	for _, c := range cards {
		want[c] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range v.Nodes {
		if n.Name != node {
			continue
		}
		for _, c := range n.Cards {
			if !want[c.Index] {
				continue
			}
			for _, p := range c.Pods {
				if name := p.Namespace + "/" + p.Name; !seen[name] {
					seen[name] = true
					out = append(out, name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// cardList writes "card 1" or "cards 0, 3".
func cardList(cards []int) string {
	s := make([]string, len(cards))
	for i, c := range cards {
		s[i] = fmt.Sprint(c)
	}
	if len(cards) == 1 {
		return "card " + s[0]
	}
	return "cards " + strings.Join(s, ", ")
}
