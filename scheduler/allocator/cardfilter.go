package allocator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/api"
)

// ReasonNoMatchingCard: no card of the node is one the pod chose (its
// card-models, exclude-card-models or card-uuids annotations), whatever their
// health. Preemption cannot help.
const ReasonNoMatchingCard ReasonCode = "NoMatchingCard"

// CardFilter is a pod's choice of cards (api.CardChoice) as the decision
// reads it for every card of every candidate node. Matching a model name by
// words costs ~100 ns, so the verdicts for the model names the caller knows
// of (the cluster's, from Workload.ModelCapacity) are worked out once, when
// the filter is made; a card whose model was not known then is matched by
// words, with the same result. A nil *CardFilter allows every card.
//
// A CardFilter is immutable once made: the goroutines of EvaluateParallel
// share it.
type CardFilter struct {
	choice api.CardChoice
	// models[i] is a known model name, allowed[i] its verdict under the
	// choice's model lists.
	models  []string
	allowed []bool
}

// NewCardFilter returns the filter for choice, nil when the choice allows
// every card. knownModels are model names whose verdicts are worked out
// now (any may be missing; duplicates are harmless).
func NewCardFilter(choice api.CardChoice, knownModels []string) *CardFilter {
	if choice.Empty() {
		return nil
	}
	f := &CardFilter{choice: choice}
	if len(choice.Models) > 0 || len(choice.ExcludeModels) > 0 {
		for _, m := range knownModels {
			f.models = append(f.models, m)
			f.allowed = append(f.allowed, choice.AllowsModel(m))
		}
	}
	return f
}

// Choice is the pod's choice the filter was made from.
func (f *CardFilter) Choice() api.CardChoice {
	if f == nil {
		return api.CardChoice{}
	}
	return f.choice
}

// Allows reports whether the pod chose card c (its health is not looked at).
func (f *CardFilter) Allows(c *Card) bool {
	if f == nil {
		return true
	}
	if len(f.choice.UUIDs) > 0 && !f.choice.AllowsUUID(c.UUID) {
		return false
	}
	if len(f.choice.Models) == 0 && len(f.choice.ExcludeModels) == 0 {
		return true
	}
	for i, m := range f.models {
		if m == c.Model {
			return f.allowed[i]
		}
	}
	return f.choice.AllowsModel(c.Model)
}

// cardChoiceReason is the reason a demand fails on a node where the pod's
// card choice allows none of its cards (ReasonNoMatchingCard), naming what
// the node has; ok is false when the choice allows some card of the node
// (or the pod made no choice, or the node has no cards): the caller's own
// reason then applies.
//
// The messages are the same on every node with the same models, so that
// kube-scheduler's FailedScheduling event, which counts nodes per message,
// stays short on a large cluster. Worked example, card-models "H100" on a
// node of eight L4 cards: `no card of model "H100" on this node for
// container "main" (annotation gpushare.example.com/card-models); models
// here: NVIDIA L4`.
func cardChoiceReason(node *Node, dm Demand, req Request) (Reason, bool) {
	f := req.Cards
	if f == nil || len(node.Cards) == 0 {
		return Reason{}, false
	}
	var byModel, byUUID, both bool
	ch := f.choice
	for i := range node.Cards {
		c := &node.Cards[i]
		if f.Allows(c) {
			return Reason{}, false
		}
		// Not allowed: by the allowed models, the UUIDs, or (if both
		// pass) an excluded model.
		m := len(ch.Models) == 0 || slices.ContainsFunc(ch.Models, func(p api.ModelPattern) bool { return p.Matches(c.Model) })
		u := ch.AllowsUUID(c.UUID)
		byModel = byModel || m
		byUUID = byUUID || u
		both = both || (m && u)
	}
	var msg string
	switch {
	case len(ch.UUIDs) > 0 && !byUUID:
		// None of the named cards is here.
		what := "card " + ch.UUIDs[0] + " is not"
		if len(ch.UUIDs) > 1 {
			what = "none of the cards " + strings.Join(ch.UUIDs, ", ") + " is"
		}
		msg = fmt.Sprintf("%s on this node (container %q, annotation %s)", what, dm.Container, api.AnnotationCardUUIDs)
	case len(ch.Models) > 0 && !byModel:
		msg = fmt.Sprintf("no card of model %q on this node for container %q (annotation %s); models here: %s",
			joinModelPatterns(ch.Models), dm.Container, api.AnnotationCardModels, nodeModels(node))
	case !both:
		// Models and UUIDs each match some card, never the same one.
		msg = fmt.Sprintf("no card on this node is both of the chosen models and one of the chosen cards for container %q (%s); cards here: %s",
			dm.Container, ch.String(), nodeCards(node))
	default:
		// What the model lists allow is all excluded.
		msg = fmt.Sprintf("every card the pod could take on this node is of an excluded model for container %q (%s); models here: %s",
			dm.Container, ch.String(), nodeModels(node))
	}
	return Reason{Code: ReasonNoMatchingCard, Container: dm.Container, Message: msg}, true
}

func joinModelPatterns(ps []api.ModelPattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Text
	}
	return strings.Join(s, "|")
}

// nodeModels lists the node's card models, sorted, each once.
func nodeModels(node *Node) string {
	var ms []string
	for _, c := range node.Cards {
		m := c.Model
		if m == "" {
			m = "(no model)"
		}
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return strings.Join(slices.Compact(ms), ", ")
}

// nodeCards lists the node's cards as "UUID (model)", in index order.
func nodeCards(node *Node) string {
	s := make([]string, len(node.Cards))
	for i, c := range node.Cards {
		s[i] = fmt.Sprintf("%s (%s)", c.UUID, c.Model)
	}
	return strings.Join(s, ", ")
}
