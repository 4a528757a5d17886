package inspect

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// PendingView is what `kubectl inspect gpushare pending` shows: the GPU pods
// waiting for a node, why the scheduler says they wait, and the smallest
// change found that would place each. Like View, its field names are a
// stable interface (-o json, -o yaml).
type PendingView struct {
	Version int `json:"version"`
	// Pods are sorted by namespace and name; never nil.
	Pods []PendingPod `json:"pods"`
}

// PendingPod is one GPU pod that no node has been chosen for.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Asks is the pod's GPU demand in words ("48 on one card", "2 whole
	// cards"), in the units of the nodes it may run on.
	Asks string `json:"asks"`
	// Scheduler is the scheduler's reason, the message of the pod's
	// PodScheduled=False condition (the gpushare extender's reasons are
	// in it); empty when the scheduler has not reported on the pod yet.
	Scheduler string `json:"scheduler"`
	// Change is the smallest change found that would give it GPU memory.
	Change Change `json:"change"`
}

// ChangeKind classifies a Change; the values are a stable interface.
type ChangeKind string

const (
	// ChangeNone: the GPU memory is there now (on Change.Node); the pod
	// waits for something else (CPU, memory, taints, affinity: see the
	// scheduler's message), or for the scheduler to retry.
	ChangeNone ChangeKind = "FitsNow"
	// ChangeFree: it would fit on Change.Node if Change.Units were freed on
	// Change.Cards (held by Change.Holders).
	ChangeFree ChangeKind = "Free"
	// ChangeNoCard: no node that takes pods has a card (or enough cards)
	// of the size the pod asks for, among those it may use: freeing memory
	// will not help; a smaller request or another card will.
	ChangeNoCard ChangeKind = "NoCardOfThatSize"
	// ChangeFixRequest: the pod's request or card choice cannot be read; no
	// node will take it until it is fixed.
	ChangeFixRequest ChangeKind = "FixRequest"
)

// Change is the smallest change found that would place a pending pod.
type Change struct {
	Kind ChangeKind `json:"kind"`
	Node string     `json:"node,omitempty"`
	// Cards are the indexes of the cards to free on Node.
	Cards []int `json:"cards,omitempty"`
	// Units is how much memory to free, in Unit.
	Units int64          `json:"units,omitempty"`
	Unit  api.MemoryUnit `json:"unit,omitempty"`
	// Holders are the pods on Cards ("namespace/name").
	Holders []string `json:"holders,omitempty"`
	// Message says it in words.
	Message string `json:"message"`
}

// waiting reports whether a pod waits for a node: not bound, not finished,
// not being deleted.
func waiting(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && p.DeletionTimestamp == nil && api.HoldsUnits(p)
}

// BuildPending finds the GPU pods waiting for a node among pods and works
// out, against the cluster's GPUs as v shows them, the smallest change that
// would place each. It is a pure function of its arguments. Fit is decided
// by the extender's own allocator (scheduler/allocator), on the cards of the
// nodes that take new pods (not cordoned; healthy, not isolated cards).
func BuildPending(names api.Names, v View, pods []corev1.Pod) PendingView {
	names = names.OrDefault()
	out := PendingView{Version: ViewVersion, Pods: []PendingPod{}}
	nodes := snapshot(v)
	unit := newUnitStyle(v).common
	for i := range pods {
		p := &pods[i]
		if !waiting(p) {
			continue
		}
		req, err := names.RequestFromPod(p)
		if err == nil && req.Empty() {
			continue // not a GPU pod
		}
		pp := PendingPod{Namespace: p.Namespace, Name: p.Name, Scheduler: schedulerMessage(p)}
		switch {
		case err != nil:
			pp.Asks = "an invalid request"
			pp.Change = Change{Kind: ChangeFixRequest, Message: "fix the pod's GPU request: " + err.Error()}
		case req.ChoiceErr != nil:
			pp.Asks = asks(req, unit)
			pp.Change = Change{Kind: ChangeFixRequest, Message: "fix the pod's card choice: " + req.ChoiceErr.Error()}
		default:
			pp.Asks = asks(req, unit)
			pp.Change = Suggest(nodes, v, allocator.NewRequest(req))
		}
		out.Pods = append(out.Pods, pp)
	}
	sort.Slice(out.Pods, func(i, j int) bool {
		a, b := out.Pods[i], out.Pods[j]
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
	return out
}

// schedulerMessage is the message of the pod's PodScheduled=False condition.
func schedulerMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// asks writes a demand in words: "48 GiB on one card", "10 and 20 GiB, each
// on one card", "2 whole cards", joined by " + ". unit is the nodes' common
// unit; when they have none the figures are bare (a request is in the units
// of the node it lands on).
func asks(r api.PodRequest, unit api.MemoryUnit) string {
	u := ""
	if unit != "" {
		u = " " + string(unit)
	}
	var parts []string
	switch len(r.Containers) {
	case 0:
	case 1:
		parts = append(parts, fmt.Sprintf("%d%s on one card", r.Containers[0].Units, u))
	default:
		var each []string
		for _, c := range r.Containers {
			each = append(each, fmt.Sprint(c.Units))
		}
		parts = append(parts, strings.Join(each, " and ")+u+", each on one card")
	}
	if n := r.WholeCardTotal(); n > 0 {
		parts = append(parts, plural(n, "whole card"))
	}
	s := strings.Join(parts, " + ")
	if !r.Cards.Empty() {
		s += " (" + r.Cards.String() + ")"
	}
	return s
}

// snapshot is the allocator's picture of the nodes that take new pods
// through the device plugin.
func snapshot(v View) []*allocator.Node {
	refused := map[string]bool{}
	for _, w := range v.Warnings {
		if w.Code == WarnInvalidIsolation {
			refused[w.Node] = true
		}
	}
	var out []*allocator.Node
	for _, n := range v.Nodes {
		if !takesPods(n, refused) || n.DRA { // a DRA node takes claims, not example.com/gpu-mem pods
			continue
		}
		an := &allocator.Node{Name: n.Name, Unit: n.Unit}
		for _, c := range n.Cards {
			an.Cards = append(an.Cards, allocator.Card{Index: c.Index, UUID: c.UUID, Model: c.Model, Capacity: c.Total, Used: c.Allocated, Whole: c.Whole, State: c.State})
		}
		out = append(out, an)
	}
	return out
}
