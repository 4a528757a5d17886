package allocator

import "slices"

// Policy is a named placement strategy: how to pick a card for a demand on
// a node, and how much to like the node once the pod is placed on it.
// Policies are values; registry.Lookup finds them by the name an operator
// configures.
type Policy struct {
	// Name is what --policy selects.
	Name string
	// Description is one line for --help and docs.
	Description string
	// ChooseCard returns the position in node.Cards of the card to use for d,
	// or -1. free[i] is what card i still has for this pod (Unusable or
	// TakenWhole when negative);
	// for a whole-card demand only cards with CanTakeWhole(node, free, i)
	// may be returned, for a share only cards with free[i] >= d.Units.
	ChooseCard func(node *Node, free []int64, d Demand, w *Workload) int
	// Score rates the node with the pod placed: free is what each card has
	// left afterwards (Unusable, TakenWhole when negative). Higher is preferred.
	Score func(node *Node, free []int64, req Request, w *Workload) float64
	// IgnoresWorkload says ChooseCard and Score never read the workload:
	// a decision is the same under any. The extender's memo then keeps the
	// policy's decisions while new pods arrive (each changes the workload).
	// TestPoliciesThatIgnoreTheWorkloadDecideTheSameUnderAny holds it.
	IgnoresWorkload bool
	// FastEvaluate, when set, is a fast path of Evaluate: for the requests
	// and nodes it takes it returns ok and exactly what the decision core
	// gives with ChooseCard and Score (Decide without the placements); for
	// the others it returns !ok and the core decides (see summary.go and
	// the frag package's fast path). A copy of a Policy keeps it: a caller
	// that replaces ChooseCard or Score builds a new Policy value instead.
	FastEvaluate func(node *Node, req Request, w *Workload) (d Decision, ok bool)
}

// Sentinels in the free slices a policy sees.
const (
	// Unusable marks a card this pod cannot use (unhealthy, isolated, or
	// not among the cards or models the pod chose). Other pods may still use it.
	Unusable int64 = -1
	// TakenWhole marks a card given whole to this pod.
	TakenWhole int64 = -2
)

// CanTakeWhole reports whether card i can be given whole: usable and unused.
func CanTakeWhole(node *Node, free []int64, i int) bool {
	c := node.Cards[i]
	return free[i] > 0 && free[i] == c.Capacity && c.Used == 0 && !c.Whole
}

// usable reports whether card i is schedulable and of an allowed model.
func usable(c Card, models []string) bool {
	if !c.Schedulable() {
		return false
	}
	if len(models) == 0 {
		return true
	}
	return slices.Contains(models, c.Model)
}

// Decide places req on node under policy p. It is pure: node is not changed.
func (p *Policy) Decide(node *Node, req Request, w *Workload) Decision {
	return p.decide(node, req, w, true, nil)
}

// Evaluate is Decide without the placements: the filter and prioritize hot
// path, which only needs the verdict, the reasons and the score.
func (p *Policy) Evaluate(node *Node, req Request, w *Workload) Decision {
	if p.FastEvaluate != nil {
		if d, ok := p.FastEvaluate(node, req, w); ok {
			return d
		}
	}
	return p.decide(node, req, w, false, nil)
}
