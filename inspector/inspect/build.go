package inspect

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// counts reports whether a pod holds GPU memory on a node now: it is bound
// and still holds its units (api.HoldsUnits: a terminating pod does, a
// finished one does not). The extender's cache counts the same pods.
func counts(p *corev1.Pod) bool { return p.Spec.NodeName != "" && api.HoldsUnits(p) }

// nodeBuild is a Node under construction.
type nodeBuild struct {
	names  api.Names
	view   *Node
	inv    api.Inventory
	hasInv bool
	// cardPos maps a card UUID to its position in view.Cards.
	cardPos map[string]int
	// healthy is the units of the cards the device plugin reports
	// schedulable; checkAllocatable says whether the kubelet's allocatable
	// is to be compared with it once the pods are placed (checkAllocatable).
	healthy          int64
	checkAllocatable bool
	// dra is the node's DRA side (nil: none); sliced says its cards come
	// from its ResourceSlice (it has no readable inventory).
	dra    *api.DRANode
	sliced bool
	// draUnreadable: the DRA objects could not be read (DRA.Unreadable).
	draUnreadable bool
}

// checkAllocatableAfterPlacement warns when the kubelet's allocatable
// differs from the healthy cards' units. A card held whole
// (example.com/gpu) has its units reported unhealthy to the kubelet on
// purpose (its memory is not to be shared) from the moment the device plugin
// gives it out, so those units are not expected in allocatable. A card whose
// whole-card assignment is still pending (phase Assigned) may or may not be
// given out yet, so allocatable may count its units or not.
func (b *nodeBuild) checkAllocatableAfterPlacement(warnings *[]Warning) {
	if !b.checkAllocatable || b.view.Allocatable == nil {
		return
	}
	var given, pending int64
	for _, c := range b.view.Cards {
		if !c.Whole || c.State != api.CardHealthy {
			continue
		}
		if slices.ContainsFunc(c.Pods, func(p Pod) bool { return p.Whole && !p.Pending }) {
			given += c.Total
		} else {
			pending += c.Total
		}
	}
	high, low := b.healthy-given, b.healthy-given-pending
	got := *b.view.Allocatable
	if got >= low && got <= high {
		return
	}
	want := fmt.Sprintf("total %d %s", high, b.inv.Unit)
	if low != high {
		want = fmt.Sprintf("total %d to %d %s", low, high, b.inv.Unit)
	}
	held := ""
	if given+pending > 0 {
		held = " (not counting the cards held whole)"
	}
	*warnings = append(*warnings, Warning{Node: b.view.Name, Code: WarnAllocatableMismatch,
		Message: fmt.Sprintf("node %s: %s allocatable is %d but the inventory's healthy cards%s %s", b.view.Name, b.names.ResourceName(), got, held, want)})
}

// Build turns the cluster's nodes, pods and DRA objects into a View. It is
// a pure function: everything is decoded with the api package, nothing is
// fetched. Nodes that are neither GPU nodes (IsGPUNode) nor DRA nodes (a
// ResourceSlice of the gpushare driver, or its claims, api.Names.DRAUsage)
// are ignored; pods are counted when bound and holding their units
// (api.HoldsUnits), claims when allocated (placeClaims).
func Build(names api.Names, c Cluster) View {
	names = names.OrDefault()
	v := View{Version: ViewVersion, Source: SourceAPIServer, Nodes: []Node{}, Totals: []Total{}, Warnings: []Warning{}}
	dra := names.DRAUsage(pointers(c.DRA.Slices), pointers(c.DRA.Claims))
	builds := map[string]*nodeBuild{}
	known := map[string]bool{}
	var order []*nodeBuild
	for i := range c.Nodes {
		n := &c.Nodes[i]
		known[n.Name] = true
		d := dra[n.Name]
		if !IsGPUNode(names, n) && d == nil {
			continue
		}
		if d == nil && isDRANode(names, n) {
			d = &api.DRANode{Name: n.Name} // labelled for DRA, nothing published (or readable)
		}
		b := buildNode(names, n, d, c.DRA.Unreadable != "", &v.Warnings)
		builds[n.Name] = b
		order = append(order, b)
	}

	for i := range c.Pods {
		p := &c.Pods[i]
		if !counts(p) {
			continue
		}
		placePod(names, p, builds[p.Spec.NodeName], known[p.Spec.NodeName], &v.Warnings)
	}

	for _, b := range order {
		b.placeClaims(&v.Warnings)
		b.checkAllocatableAfterPlacement(&v.Warnings)
		v.Nodes = append(v.Nodes, *b.view)
	}
	claimsOffNodes(dra, known, &v.Warnings)
	if c.DRA.Unreadable != "" {
		v.Warnings = append(v.Warnings, Warning{Code: WarnDRAUnreadable, Message: c.DRA.Unreadable})
	}
	v.finish()
	return v
}

// overcommitted is the warning for a card that holds more than its total:
// TerminatingOverlap when the pods being deleted account for the excess,
// Overcommitted otherwise.
func overcommitted(n *Node, c *Card) Warning {
	var terminating int64
	var names []string
	for _, p := range c.Pods {
		if p.Terminating {
			terminating += p.Units
			if name := p.Namespace + "/" + p.Name; !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	msg := fmt.Sprintf("node %s: card %d holds %d %s but has only %d", n.Name, c.Index, c.Allocated, n.Unit, c.Total)
	if terminating == 0 || c.Allocated-terminating > c.Total {
		return Warning{Node: n.Name, Code: WarnOvercommitted, Message: msg}
	}
	return Warning{Node: n.Name, Code: WarnTerminatingOverlap, Message: fmt.Sprintf("%s, %d of them of pods being deleted (%s): the kubelet gives the units of a pod whose containers stopped to the next pod before the pod object is gone; this clears once it is deleted (if it stays, see why the pod's deletion does not finish: kubectl describe pod)",
		msg, terminating, strings.Join(names, ", "))}
}

// finish completes a View whose nodes have their cards and pods: it sorts
// everything, warns about overcommitted cards, and tallies the nodes and the
// totals.
func (v *View) finish() {
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Name < v.Nodes[j].Name })
	for ni := range v.Nodes {
		n := &v.Nodes[ni]
		sort.Slice(n.Cards, func(i, j int) bool { return n.Cards[i].Index < n.Cards[j].Index })
		for ci := range n.Cards {
			c := &n.Cards[ci]
			sort.Slice(c.Pods, func(i, j int) bool { return podLess(c.Pods[i], c.Pods[j]) })
			slices.SortFunc(c.Claims, func(a, b Claim) int {
				return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Request, b.Request))
			})
			if c.Allocated > c.Total {
				v.Warnings = append(v.Warnings, overcommitted(n, c))
			}
		}
		sort.Slice(n.Uncounted, func(i, j int) bool { return uncountedLess(n.Uncounted[i], n.Uncounted[j]) })
	}
	sort.SliceStable(v.Warnings, func(i, j int) bool { return warningLess(v.Warnings[i], v.Warnings[j]) })
	v.tally()
}

// tally sums each node's cards, then the totals per unit and the model
// summary. It is idempotent: a filter that drops nodes or cards calls it
// again.
func (v *View) tally() {
	totals := map[api.MemoryUnit]*Total{}
	for ni := range v.Nodes {
		n := &v.Nodes[ni]
		n.Allocated, n.Total, n.Claimed = 0, 0, 0
		for _, c := range n.Cards {
			n.Allocated += c.Allocated
			n.Total += c.Total
			n.Claimed += c.Claimed
		}
		if n.Unit == "" {
			continue // no readable inventory: unit unknown, left out of the totals
		}
		t := totals[n.Unit]
		if t == nil {
			t = &Total{Unit: n.Unit}
			totals[n.Unit] = t
		}
		t.Allocated += n.Allocated
		t.Total += n.Total
	}
	v.summarize(totals)
	v.Totals = make([]Total, 0, len(totals))
	for _, t := range totals {
		t.Percent = Percent(t.Allocated, t.Total)
		t.InServicePercent = Percent(t.InServiceAllocated, t.InService)
		v.Totals = append(v.Totals, *t)
	}
	sort.Slice(v.Totals, func(i, j int) bool { return v.Totals[i].Unit < v.Totals[j].Unit })
}

// buildNode reads one GPU node's inventory and status and checks that they
// agree, appending a warning for each disagreement. On a DRA node (d not
// nil) the cards come from its ResourceSlice when it has no readable
// inventory (sliceCards), and the kubelet's figures are not checked: the
// device plugin does not serve there. draUnreadable says the DRA objects
// could not be read.
func buildNode(names api.Names, n *corev1.Node, d *api.DRANode, draUnreadable bool, warnings *[]Warning) *nodeBuild {
	view := &Node{
		Name:      n.Name,
		Address:   internalIP(n),
		Cordoned:  n.Spec.Unschedulable,
		DRA:       d != nil,
		Cards:     []Card{},
		Uncounted: []Uncounted{},
	}
	if q, ok := n.Status.Capacity[names.ResourceName()]; ok {
		c := q.Value()
		view.Capacity = &c
	}
	if q, ok := n.Status.Allocatable[names.ResourceName()]; ok {
		a := q.Value()
		view.Allocatable = &a
	}
	b := &nodeBuild{names: names, view: view, cardPos: map[string]int{}, dra: d, draUnreadable: draUnreadable}
	warn := func(code WarningCode, format string, args ...any) {
		*warnings = append(*warnings, Warning{Node: n.Name, Code: code, Message: fmt.Sprintf(format, args...)})
	}

	inv, err := names.InventoryFromNode(n)
	switch {
	case err != nil && d != nil:
		b.sliceCards(n, warn)
		return b
	case errors.Is(err, api.ErrNoInventory):
		view.InventoryError = err.Error()
		switch {
		case view.Capacity != nil && *view.Capacity > 0:
			warn(WarnNoInventory, "node %s: %s capacity is %d but the node has no %s annotation (is the gpushare device plugin running on it?); its cards and unit are unknown and it is left out of the totals",
				n.Name, names.ResourceName(), *view.Capacity, names.AnnotationInventory())
		default:
			warn(WarnNoInventory, "node %s: no %s capacity and no %s annotation: the gpushare device plugin has reported nothing (is it running on the node?)",
				n.Name, names.ResourceName(), names.AnnotationInventory())
		}
		return b
	case err != nil:
		view.InventoryError = err.Error()
		warn(WarnInvalidInventory, "%v; the node's cards are unknown and it is left out of the totals", err)
		return b
	}

	b.inv, b.hasInv = inv, true
	view.Unit = inv.Unit
	iso := isolation(names, n, warn)
	cards := append([]api.Card(nil), inv.Cards...)
	sort.Slice(cards, func(i, j int) bool { return cards[i].Index < cards[j].Index })
	var healthy int64
	for _, c := range cards {
		b.cardPos[c.UUID] = len(view.Cards)
		shown := iso.Apply(sliceState(d, c))
		view.Cards = append(view.Cards, Card{
			Index: c.Index, UUID: c.UUID, Model: c.Model, State: shown.State, Reason: shown.Reason,
			Total: c.Units, UsedMiB: c.UsedMiB, Pods: []Pod{},
		})
		view.Total += c.Units
		if c.Schedulable() { // as the device plugin reported it to the kubelet
			healthy += c.Units
		}
	}

	capacity := int64(0)
	if view.Capacity != nil {
		capacity = *view.Capacity
	}
	switch {
	case d != nil:
		// Served through DRA: the device plugin's figures do not apply.
	case len(cards) == 0:
		warn(WarnNoCards, "node %s: the gpushare inventory lists no cards (did the device plugin find no GPU?)", n.Name)
	case capacity == 0:
		warn(WarnNoCapacity, "node %s: the inventory lists %s (%d %s) but the node reports no %s capacity: the device plugin has registered nothing with the kubelet",
			n.Name, plural(len(cards), "card"), view.Total, inv.Unit, names.ResourceName())
	default:
		if capacity != view.Total {
			warn(WarnCapacityMismatch, "node %s: %s capacity is %d but the inventory's cards total %d %s",
				n.Name, names.ResourceName(), capacity, view.Total, inv.Unit)
		}
		b.healthy, b.checkAllocatable = healthy, true
	}
	return b
}

// isolation is the node's isolation annotation: the operator's isolation
// takes effect in the extender at once, before the device plugin reports
// the card isolated; it is shown the same way. A malformed one makes the
// extender refuse the node (warned).
func isolation(names api.Names, n *corev1.Node, warn func(WarningCode, string, ...any)) api.Isolation {
	s, ok := n.Annotations[names.AnnotationIsolation()]
	if !ok {
		return api.Isolation{}
	}
	iso, err := api.ParseIsolation(s)
	if err != nil {
		warn(WarnInvalidIsolation, "node %s: %s annotation: %v; the gpushare extender places no new pods on this node until it is fixed",
			n.Name, names.AnnotationIsolation(), err)
	}
	return iso
}

// placePod puts a counted pod's containers on the cards of its node, or
// records why it cannot. b is nil when the pod's node is not a GPU node;
// nodeExists says whether the node exists at all.
func placePod(names api.Names, p *corev1.Pod, b *nodeBuild, nodeExists bool, warnings *[]Warning) {
	podName := p.Namespace + "/" + p.Name
	uncounted := func(container string, code WarningCode, msg string) {
		*warnings = append(*warnings, Warning{Node: p.Spec.NodeName, Pod: podName, Code: code, Message: msg})
		if b != nil {
			b.view.Uncounted = append(b.view.Uncounted, Uncounted{Namespace: p.Namespace, Name: p.Name, Container: container, Code: code, Message: msg})
		}
	}

	a, err := names.TrustedAssignment(p, api.RecordKeys{}) // the inspector holds no record keys
	switch {
	case errors.Is(err, api.ErrNoAssignment):
		if b == nil {
			return // not a GPU node: a pod without an assignment is nothing to us
		}
		req, rerr := names.RequestFromPod(p)
		switch {
		case rerr != nil:
			uncounted("", WarnNoAssignment, fmt.Sprintf("pod %s on node %s: no gpushare assignment and an invalid request: %v", podName, p.Spec.NodeName, rerr))
		case len(req.Containers) == 0 && len(req.WholeCards) > 0:
			uncounted("", WarnNoAssignment, fmt.Sprintf("pod %s on node %s requests %d %s (whole cards) but has no %s annotation: it was not placed by the gpushare extender, so its cards are unknown and it is not counted",
				podName, p.Spec.NodeName, req.WholeCardTotal(), names.WholeResourceName(), names.AnnotationAssignment()))
		case !req.Empty():
			uncounted("", WarnNoAssignment, fmt.Sprintf("pod %s on node %s requests %d %s but has no %s annotation: it was not placed by the gpushare extender, so its card is unknown and it is not counted",
				podName, p.Spec.NodeName, req.Total(), names.ResourceName(), names.AnnotationAssignment()))
		}
		return
	case err != nil:
		uncounted("", WarnMalformedAssignment, err.Error()+"; not counted")
		return
	}

	switch {
	case !nodeExists:
		uncounted("", WarnNodeUnusable, fmt.Sprintf("pod %s is bound to node %s, which does not exist; not counted", podName, p.Spec.NodeName))
		return
	case b == nil:
		uncounted("", WarnNodeUnusable, fmt.Sprintf("pod %s has a gpushare assignment on node %s, which is not a GPU node; not counted", podName, p.Spec.NodeName))
		return
	case !b.hasInv:
		uncounted("", WarnNodeUnusable, fmt.Sprintf("pod %s has a gpushare assignment on node %s, whose inventory is unreadable; not counted", podName, p.Spec.NodeName))
		return
	case a.Unit != b.inv.Unit:
		uncounted("", WarnUnitMismatch, fmt.Sprintf("pod %s: its assignment is in %s but node %s's inventory is in %s; not counted", podName, a.Unit, p.Spec.NodeName, b.inv.Unit))
		return
	}
	for _, c := range a.Containers {
		pos, ok := b.cardPos[c.CardUUID]
		if !ok {
			uncounted(c.Name, WarnUnknownCard, fmt.Sprintf("pod %s container %s: assigned card %d (%s), which node %s's inventory does not list; %d %s not counted",
				podName, c.Name, c.CardIndex, c.CardUUID, p.Spec.NodeName, c.Units, a.Unit))
			continue
		}
		card := &b.view.Cards[pos]
		card.Allocated += c.Units
		pod := newPod(p.Namespace, p.Name, c.Name, c.Units, api.HeldPhase(p, a))
		pod.Terminating = p.DeletionTimestamp != nil
		card.Pods = append(card.Pods, pod)
	}
	for _, w := range a.WholeCards {
		for i, uuid := range w.CardUUIDs {
			pos, ok := b.cardPos[uuid]
			if !ok {
				uncounted(w.Name, WarnUnknownCard, fmt.Sprintf("pod %s container %s: card %d (%s) given whole, which node %s's inventory does not list; not counted",
					podName, w.Name, w.CardIndexes[i], uuid, p.Spec.NodeName))
				continue
			}
			card := &b.view.Cards[pos]
			card.Whole = true
			card.Allocated += card.Total
			pod := newPod(p.Namespace, p.Name, w.Name, card.Total, api.HeldPhase(p, a))
			pod.Whole, pod.Terminating = true, p.DeletionTimestamp != nil
			card.Pods = append(card.Pods, pod)
		}
	}
}

// plural writes "1 card", "2 cards".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// podLess and uncountedLess order by namespace, pod name, then container.
func podLess(a, b Pod) bool {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Container, b.Container)) < 0
}

func uncountedLess(a, b Uncounted) bool {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Container, b.Container)) < 0
}

// warningLess orders by node, pod, claim, code, then message.
func warningLess(a, b Warning) bool {
	return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Message, b.Message)) < 0
}
