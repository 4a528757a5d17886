package allocator

import (
	"cmp"
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
// the filter is made, with the reason a node of only that model gets when it
// has no card the pod chose; a card whose model was not known then is
// matched by words, with the same result. A nil *CardFilter allows every
// card.
//
// A CardFilter is immutable once made: the goroutines of EvaluateParallel
// share it.
type CardFilter struct {
	choice api.CardChoice
	// byModel: the choice has model lists; byUUID: it lists UUIDs.
	byModel, byUUID bool
	// models[i] is a known model name, verdicts[i] its verdict.
	models   []string
	verdicts []modelVerdict
	// uuidMessage is the reason on a node without any of the UUIDs.
	uuidMessage string
}

// modelVerdict is what a choice's model lists say of one model.
type modelVerdict struct {
	// included: Models is empty or the model matches one entry;
	// excluded: it matches an entry of ExcludeModels.
	included, excluded bool
	// alone is the reason on a node whose cards are all of this model and
	// none chosen ("" when the model's cards are allowed, or when UUIDs
	// decide the reason).
	alone string
}

func (v modelVerdict) allowed() bool { return v.included && !v.excluded }

// NewCardFilter returns the filter for choice, nil when the choice allows
// every card. knownModels are model names whose verdicts are worked out
// now (any may be missing; duplicates are harmless).
func NewCardFilter(choice api.CardChoice, knownModels []string) *CardFilter {
	if choice.Empty() {
		return nil
	}
	f := &CardFilter{choice: choice, byModel: len(choice.Models) > 0 || len(choice.ExcludeModels) > 0, byUUID: len(choice.UUIDs) > 0}
	if f.byUUID {
		what := "card " + choice.UUIDs[0] + " is not"
		if len(choice.UUIDs) > 1 {
			what = "none of the cards " + strings.Join(choice.UUIDs, ", ") + " is"
		}
		f.uuidMessage = fmt.Sprintf("%s on this node (annotation %s)", what, choice.UUIDsKey())
	}
	if f.byModel {
		for _, m := range knownModels {
			v := f.verdict(m)
			if !v.allowed() && !f.byUUID {
				v.alone = f.modelMessage(v.included, displayModel(m))
			}
			f.models = append(f.models, m)
			f.verdicts = append(f.verdicts, v)
		}
	}
	return f
}

// verdict matches model against the choice's lists, by words.
func (f *CardFilter) verdict(model string) modelVerdict {
	v := modelVerdict{included: len(f.choice.Models) == 0}
	for _, p := range f.choice.Models {
		if p.Matches(model) {
			v.included = true
			break
		}
	}
	for _, p := range f.choice.ExcludeModels {
		if p.Matches(model) {
			v.excluded = true
			break
		}
	}
	return v
}

// lookup is verdict, from the known models when it can.
func (f *CardFilter) lookup(model string) modelVerdict {
	for i, m := range f.models {
		if m == model {
			return f.verdicts[i]
		}
	}
	return f.verdict(model)
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
	if f.byUUID && !f.choice.AllowsUUID(c.UUID) {
		return false
	}
	return !f.byModel || f.lookup(c.Model).allowed()
}

// cardChoiceReason is the reason a demand fails on a node where the pod's
// card choice allows none of its cards (ReasonNoMatchingCard), naming what
// the node has; ok is false when the choice allows some card of the node
// (or the pod made no choice, or the node has no cards): the caller's own
// reason then applies.
//
// The choice is the pod's, not a container's, so the message names no
// container: it is the same on every node with the same models, and
// kube-scheduler's FailedScheduling event, which counts nodes per message,
// stays short on a large cluster. On a node of one known model, or without
// any of the UUIDs, it was written when the filter was made: a pod that fits
// nowhere costs no formatting per node. Worked example, card-models "H100"
// on a node of eight L4 cards: `no card of model "H100" on this node
// (annotation gpushare.example.com/card-models); models here: NVIDIA L4`.
func cardChoiceReason(node *Node, dm Demand, req Request) (Reason, bool) {
	f := req.Cards
	if f == nil || len(node.Cards) == 0 {
		return Reason{}, false
	}
	var byModel, byUUID, both, alike bool
	alike = true
	var first modelVerdict
	for i := range node.Cards {
		c := &node.Cards[i]
		u := !f.byUUID || f.choice.AllowsUUID(c.UUID)
		v := modelVerdict{included: true}
		if f.byModel {
			v = f.lookup(c.Model)
		}
		if u && v.allowed() {
			return Reason{}, false
		}
		if i == 0 {
			first = v
		}
		alike = alike && c.Model == node.Cards[0].Model
		byModel = byModel || v.included
		byUUID = byUUID || u
		both = both || (v.included && u)
	}
	reason := func(msg string) (Reason, bool) {
		return Reason{Code: ReasonNoMatchingCard, Container: dm.Container, Message: msg}, true
	}
	ch := f.choice
	switch {
	case f.byUUID && !byUUID:
		return reason(f.uuidMessage)
	case alike && first.alone != "":
		return reason(first.alone)
	case len(ch.Models) > 0 && !byModel:
		return reason(f.modelMessage(false, nodeModels(node)))
	case !both:
		// Models and UUIDs each match some card, never the same one.
		return reason(fmt.Sprintf("no card on this node is both of the chosen models and one of the chosen cards (%s); cards here: %s", ch.String(), nodeCards(node)))
	default:
		return reason(f.modelMessage(true, nodeModels(node)))
	}
}

// modelMessage is the reason on a node whose cards the model lists rule
// out: none of an allowed model (included false), or every allowed one
// excluded; models are the node's.
func (f *CardFilter) modelMessage(included bool, models string) string {
	if !included {
		return fmt.Sprintf("no card of model %q on this node (annotation %s); models here: %s",
			api.JoinModelPatterns(f.choice.Models), f.choice.ModelsKey(), models)
	}
	return fmt.Sprintf("every card the pod could take on this node is of an excluded model (%s); models here: %s",
		f.choice.String(), models)
}

// nodeModels lists the node's card models, sorted, each once.
func nodeModels(node *Node) string {
	var ms []string
	for _, c := range node.Cards {
		ms = append(ms, displayModel(c.Model))
	}
	slices.Sort(ms)
	return strings.Join(slices.Compact(ms), ", ")
}

// displayModel is a card's model for messages.
func displayModel(m string) string { return cmp.Or(m, "(no model)") }

// nodeCards lists the node's cards as "UUID (model)", in index order.
func nodeCards(node *Node) string {
	s := make([]string, len(node.Cards))
	for i, c := range node.Cards {
		s[i] = fmt.Sprintf("%s (%s)", c.UUID, c.Model)
	}
	return strings.Join(s, ", ")
}
