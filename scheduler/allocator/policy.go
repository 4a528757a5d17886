package allocator

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gpushare/gpushare/api"
)

// Policy is a named placement strategy: how to pick a card for a demand on
// a node, and how much to like the node once the pod is placed on it.
// Policies are values; Lookup finds them by the name an operator configures.
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
	// evaluate, when set, is a fast path of Evaluate that gives exactly
	// what decide gives with ChooseCard and Score, for the requests and
	// nodes it takes; ok is false for the others (see frag_fast.go,
	// summary.go). A copy of a Policy keeps it: a caller that replaces
	// ChooseCard or Score builds a new Policy value instead.
	evaluate func(node *Node, req Request, w *Workload) (d Decision, ok bool)
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
	for _, m := range models {
		if m == c.Model {
			return true
		}
	}
	return false
}

// Decide places req on node under policy p. It is pure: node is not changed.
func (p *Policy) Decide(node *Node, req Request, w *Workload) Decision {
	return p.decide(node, req, w, true, nil)
}

// Evaluate is Decide without the placements: the filter and prioritize hot
// path, which only needs the verdict, the reasons and the score.
func (p *Policy) Evaluate(node *Node, req Request, w *Workload) Decision {
	if p.evaluate != nil {
		if d, ok := p.evaluate(node, req, w); ok {
			return d
		}
	}
	return p.decide(node, req, w, false, nil)
}

// EvaluateAll is Evaluate on every node: out[i] = Evaluate(nodes[i], …).
// A nil node is skipped (out[i] is left as it is). len(out) must be at
// least len(nodes). It shares one scratch buffer between the nodes, where
// Evaluate allocates one per call (the slice a policy's functions receive
// escapes to the heap): the extender's filter and prioritize evaluate
// thousands of nodes per call.
func (p *Policy) EvaluateAll(nodes []*Node, req Request, w *Workload, out []Decision) {
	p.evaluateAll(nil, nodes, req, w, out)
}

// evaluateAll is EvaluateAll that stops before the next node once done is
// closed (a nil done never is) and reports whether it evaluated them all.
func (p *Policy) evaluateAll(done <-chan struct{}, nodes []*Node, req Request, w *Workload, out []Decision) bool {
	scratch := make([]int64, 0, 16)
	for i, n := range nodes {
		if done != nil && closed(done) {
			return false
		}
		if n == nil {
			continue
		}
		if p.evaluate != nil {
			if d, ok := p.evaluate(n, req, w); ok {
				out[i] = d
				continue
			}
		}
		if len(n.Cards) > cap(scratch) {
			scratch = make([]int64, 0, len(n.Cards))
		}
		out[i] = p.decide(n, req, w, false, scratch)
	}
	return true
}

// closed reports whether done is closed, without waiting.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// MinNodesPerWorker is the fewest nodes EvaluateParallel gives one
// goroutine: below it, starting goroutines costs more than it saves.
const MinNodesPerWorker = 256

// EvaluateParallel is EvaluateAll split over up to workers goroutines, each
// on a contiguous share of the nodes with its own scratch buffer; out is
// exactly what EvaluateAll gives. Nodes are independent, decide is pure and
// w is only read, so the split changes the time and nothing else. With
// workers <= 1, or fewer than 2×MinNodesPerWorker nodes, it does not split.
func (p *Policy) EvaluateParallel(nodes []*Node, req Request, w *Workload, out []Decision, workers int) {
	p.EvaluateParallelUntil(nil, nodes, req, w, out, workers)
}

// EvaluateParallelUntil is EvaluateParallel for a caller that may stop
// wanting the answer (the extender, when kube-scheduler's request is
// cancelled or times out): every goroutine checks done before each node and
// stops once it is closed. complete is false when it stopped; out is then
// only partly filled and must not be used. A nil done is never closed.
//
// done is a channel, not a context, so the decision stays a pure function
// of its arguments: the check costs one non-blocking receive per node
// (nanoseconds, against the microseconds a node's decision takes), and a
// node's decision is bounded by the pod's containers, which the extender
// caps (server.MaxGPUContainers).
func (p *Policy) EvaluateParallelUntil(done <-chan struct{}, nodes []*Node, req Request, w *Workload, out []Decision, workers int) (complete bool) {
	if most := len(nodes) / MinNodesPerWorker; workers > most {
		workers = most
	}
	if workers <= 1 {
		return p.evaluateAll(done, nodes, req, w, out)
	}
	chunk := (len(nodes) + workers - 1) / workers
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool
	)
	for lo := 0; lo < len(nodes); lo += chunk {
		hi := min(lo+chunk, len(nodes))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !p.evaluateAll(done, nodes[lo:hi], req, w, out[lo:hi]) {
				stopped.Store(true)
			}
		}()
	}
	wg.Wait()
	return !stopped.Load()
}

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

// shareReason says why no card can take a share demand.
func shareReason(node *Node, free []int64, dm Demand, req Request) Reason {
	if r, ok := cardChoiceReason(node, dm, req); ok {
		return r
	}
	var (
		usableCards, unhealthy, isolated, wrongModel int
		maxCap, maxFree                              int64
		maxFreeCard                                  = -1
		// takenWhole: cards this pod's whole-card containers took.
		takenWhole int
	)
	for i, c := range node.Cards {
		switch {
		case !c.Schedulable():
			if c.State == api.CardIsolated {
				isolated++
			} else {
				unhealthy++
			}
			continue
		case !usable(c, req.Models) || !req.Cards.Allows(&c):
			wrongModel++
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
			Message: fmt.Sprintf("no schedulable GPU for container %q (%s)", dm.Container, cardCensus(len(node.Cards), unhealthy, isolated, wrongModel, req))}
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
	var usableCards, shared, heldWhole, unhealthy, isolated, wrongModel int
	free0 := got
	for i, c := range node.Cards {
		switch {
		case !c.Schedulable():
			if c.State == api.CardIsolated {
				isolated++
			} else {
				unhealthy++
			}
			continue
		case !usable(c, req.Models) || !req.Cards.Allows(&c):
			wrongModel++
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
			Message: fmt.Sprintf("no schedulable GPU for container %q (%s)", dm.Container, cardCensus(len(node.Cards), unhealthy, isolated, wrongModel, req))}
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

func cardCensus(total, unhealthy, isolated, wrongModel int, req Request) string {
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

// Names lists the known policies, sorted.
func Names() []string {
	var names []string
	for n := range registry() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the policy registered under name. An unknown name is an
// error that lists the known ones, so a bad --policy fails at start.
func Lookup(name string) (*Policy, error) {
	p, ok := registry()[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q: known policies are %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// DefaultPolicy is the policy used when none is configured: frag, the best
// packer of the five on the traces (docs/packing.md), within the per-call
// cost target (docs/design.md, "Scheduling throughput").
const DefaultPolicy = "frag"

// registry maps a configured name to its policy. A new policy is one entry
// here plus its two functions.
func registry() map[string]*Policy {
	return map[string]*Policy{
		"binpack": {
			Name:        "binpack",
			Description: "fill the fullest card that fits (best fit) on the most allocated node, keeping whole cards and nodes free for large pods",
			ChooseCard:  bestFit,
			Score:       allocatedShare,
			evaluate:    totalsFastPath(shareOf),

			IgnoresWorkload: true,
		},
		"spread": {
			Name:        "spread",
			Description: "use the emptiest card on the least allocated node, spreading load (and the blast radius of a card failure)",
			ChooseCard:  worstFit,
			Score:       func(n *Node, free []int64, r Request, w *Workload) float64 { return 1 - allocatedShare(n, free, r, w) },
			evaluate:    totalsFastPath(func(capacity, left int64) float64 { return 1 - shareOf(capacity, left) }),

			IgnoresWorkload: true,
		},
		"bestfit": {
			Name:        "bestfit",
			Description: "the FGD paper's BestFit baseline: least CPU and GPU left on the node after placement (0.5·cores/128 + 0.5·cards/8), best-fit card",
			ChooseCard:  bestFit,
			Score:       bestFitScore,

			IgnoresWorkload: true,
		},
		"frag": NewFragPolicy(FragOptions{
			Name:           "frag",
			Description:    "fragmentation-aware: best-fit card on the node where FGD's fragmentation growth, plus the growth of GPU stranded by CPU/memory, the scarcity of the models taken and a little binpack, costs least",
			PackWeight:     FragPackWeight,
			StrandWeight:   FragStrandWeight,
			ScarcityWeight: FragScarcityWeight,
			BestFitCard:    true,
		}),
		"fgd": newFGDPolicy(),
	}
}

// bestFit picks the card that would have the least left after the demand
// (for whole cards: the smallest unused card); ties go to the lowest index.
func bestFit(node *Node, free []int64, d Demand, _ *Workload) int {
	best := -1
	for i := range free {
		if d.WholeCards > 0 {
			if CanTakeWhole(node, free, i) && (best < 0 || free[i] < free[best]) {
				best = i
			}
			continue
		}
		if free[i] >= d.Units && (best < 0 || free[i] < free[best]) {
			best = i
		}
	}
	return best
}

// worstFit picks the card with the most free (for whole cards: the largest
// unused card); ties go to the lowest index.
func worstFit(node *Node, free []int64, d Demand, _ *Workload) int {
	best := -1
	for i := range free {
		if d.WholeCards > 0 {
			if CanTakeWhole(node, free, i) && (best < 0 || free[i] > free[best]) {
				best = i
			}
			continue
		}
		if free[i] >= d.Units && (best < 0 || free[i] > free[best]) {
			best = i
		}
	}
	return best
}

// allocatedShare is the share of the node's schedulable capacity that is
// assigned once the pod is placed: 0 (empty) to 1 (full).
//
// Worked example: cards of 16 and 32 GiB holding 8 and 0 GiB, pod of 8 GiB
// best-fitted on the first card: (8+8+0)/(16+32) = 0.333.
func allocatedShare(node *Node, free []int64, _ Request, _ *Workload) float64 {
	var capacity, left int64
	for i, c := range node.Cards {
		if !c.Schedulable() {
			continue
		}
		capacity += c.Capacity
		switch f := free[i]; {
		case f >= 0:
			left += f
		case f == Unusable:
			// Excluded for this pod (model): what it had free stays free.
			left += c.Free()
		}
	}
	return shareOf(capacity, left)
}

// bestFitScore is the FGD paper's BestFit baseline: prefer the node with the
// least left after placement, CPU and GPU weighed equally against a 128-core,
// 8-GPU reference node: score = −(0.5·CPU_left/128 cores + 0.5·GPU_left/8
// cards). GPU_left counts each card's free share as a fraction of the card.
// Without host information only the GPU term counts.
//
// Worked example: 32 cores and 2.5 cards left: −(0.5·32/128 + 0.5·2.5/8) =
// −0.28125.
func bestFitScore(node *Node, free []int64, req Request, _ *Workload) float64 {
	var cards float64
	for i, c := range node.Cards {
		if !c.Schedulable() || c.Capacity <= 0 {
			continue
		}
		f := free[i]
		if f == Unusable {
			f = c.Free()
		}
		if f > 0 {
			cards += float64(f) / float64(c.Capacity)
		}
	}
	score := -0.5 * cards / 8
	if node.HostFree != nil {
		cpuLeft := node.HostFree.CPUMilli - req.Host.CPUMilli
		score -= 0.5 * float64(cpuLeft) / 128000
	}
	return score
}
