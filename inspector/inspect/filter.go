package inspect

import (
	"strings"

	"github.com/gpushare/gpushare/api"
)

// Filter narrows a View to what the user asked to see (-l, --model, -n).
// The figures of what is kept do not change: a card's allocated memory
// counts every pod on it, listed or not, since that memory is taken.
type Filter struct {
	// Nodes, when not nil, keeps only the nodes it names (those matching
	// -l/--selector).
	Nodes map[string]bool
	// Model, when set, keeps only the cards whose model it matches (the
	// matching of the card-models pod annotation, api.ModelPattern); a node
	// left with no card is dropped.
	Model *api.ModelPattern
	// Namespace, when set, lists only that namespace's pods and DRA claims
	// on the cards, in the uncounted lists and in the pod and claim
	// warnings.
	Namespace string
}

// Empty reports whether the filter keeps everything.
func (f Filter) Empty() bool { return f.Nodes == nil && f.Model == nil && f.Namespace == "" }

// Apply returns v narrowed by f, its totals and model summary recomputed
// over what is kept. It is pure: v is not changed.
func (f Filter) Apply(v View) View {
	if f.Empty() {
		return v
	}
	out := v
	out.Nodes = []Node{}
	kept := map[string]bool{}
	for _, n := range v.Nodes {
		if f.Nodes != nil && !f.Nodes[n.Name] {
			continue
		}
		n.Cards = f.cards(n.Cards)
		if f.Model != nil && len(n.Cards) == 0 {
			continue
		}
		n.Uncounted = keepEach(n.Uncounted, func(u Uncounted) bool { return f.namespaceOK(u.Namespace) })
		kept[n.Name] = true
		out.Nodes = append(out.Nodes, n)
	}
	out.Warnings = keepEach(v.Warnings, func(w Warning) bool {
		if w.Node != "" && !kept[w.Node] {
			return false
		}
		of := w.Pod + w.Claim // at most one is set
		ns, _, _ := strings.Cut(of, "/")
		return of == "" || f.namespaceOK(ns)
	})
	out.tally()
	return out
}

// cards keeps the cards of the model asked for, each with only the pods of
// the namespace asked for; it never changes the slice it is given.
func (f Filter) cards(in []Card) []Card {
	out := make([]Card, 0, len(in))
	for _, c := range in {
		if f.Model != nil && !f.Model.Matches(c.Model) {
			continue
		}
		c.Pods = keepEach(c.Pods, func(p Pod) bool { return f.namespaceOK(p.Namespace) })
		if c.Claims != nil {
			c.Claims = keepEach(c.Claims, func(cl Claim) bool { return f.namespaceOK(cl.Namespace) })
		}
		out = append(out, c)
	}
	return out
}

func (f Filter) namespaceOK(ns string) bool { return f.Namespace == "" || ns == f.Namespace }

// keepEach returns a new slice (never nil) of the elements of in that keep
// accepts.
func keepEach[T any](in []T, keep func(T) bool) []T {
	out := make([]T, 0, len(in))
	for _, x := range in {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
