package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Pod annotations by which a pod chooses its cards and its placement policy
// (Names.AnnotationCardModels, AnnotationExcludeCardModels,
// AnnotationCardUUIDs, AnnotationPolicy). They apply to every container of
// the pod that asks for a GPU, and only to pods that ask for one (a pod
// asking for no GPU has no cards to choose; its annotations are not read).
// Names.RequestFromPod reads them into PodRequest.Cards and PodRequest.Policy;
// a malformed value is PodRequest.ChoiceErr (ErrInvalidPodAnnotation): the
// extender then places the pod nowhere and says why.

// ErrInvalidPodAnnotation is PodRequest.ChoiceErr's sentinel (wrapped): a
// card-choice or policy annotation cannot be read.
var ErrInvalidPodAnnotation = errors.New("invalid gpushare pod annotation")

// CardChoice is a pod's choice of cards (the annotations above). The zero
// value allows every card. A card is allowed when all of these hold:
//   - Models is empty, or the card's model matches one of Models;
//   - the card's model matches none of ExcludeModels;
//   - UUIDs is empty, or the card's UUID is one of UUIDs (exact match).
type CardChoice struct {
	Models        []ModelPattern
	ExcludeModels []ModelPattern
	UUIDs         []string
	// Domain is the domain of the annotations the choice was read from
	// (Names.RequestFromPod sets it), for reasons that name them; empty:
	// DefaultDomain.
	Domain string
}

// ModelsKey is the annotation the choice's Models were read from.
func (c CardChoice) ModelsKey() string { return c.names().AnnotationCardModels() }

// UUIDsKey is the annotation the choice's UUIDs were read from.
func (c CardChoice) UUIDsKey() string { return c.names().AnnotationCardUUIDs() }

func (c CardChoice) names() Names {
	if c.Domain == "" {
		return DefaultNames()
	}
	return Names{domain: c.Domain}
}

// Empty reports whether the choice allows every card.
func (c CardChoice) Empty() bool {
	return len(c.Models) == 0 && len(c.ExcludeModels) == 0 && len(c.UUIDs) == 0
}

// AllowsModel reports whether a card of this model passes the model lists
// (Models and ExcludeModels; UUIDs are not looked at).
func (c CardChoice) AllowsModel(model string) bool {
	matches := func(p ModelPattern) bool { return p.Matches(model) }
	return !slices.ContainsFunc(c.ExcludeModels, matches) && (len(c.Models) == 0 || slices.ContainsFunc(c.Models, matches))
}

// AllowsUUID reports whether the card with this UUID passes UUIDs.
func (c CardChoice) AllowsUUID(uuid string) bool {
	if len(c.UUIDs) == 0 {
		return true
	}
	return slices.Contains(c.UUIDs, uuid)
}

// Allows reports whether a card of this model and UUID is allowed.
func (c CardChoice) Allows(model, uuid string) bool {
	return c.AllowsUUID(uuid) && c.AllowsModel(model)
}

// String is the choice as the annotations say it, for reasons, e.g.
// `card-models "H100|A100-80GB", card-uuids "GPU-1"`; "" when empty.
func (c CardChoice) String() string {
	var parts []string
	if len(c.Models) > 0 {
		parts = append(parts, fmt.Sprintf("%s %q", keyCardModels, JoinModelPatterns(c.Models)))
	}
	if len(c.ExcludeModels) > 0 {
		parts = append(parts, fmt.Sprintf("%s %q", keyExcludeCardModels, JoinModelPatterns(c.ExcludeModels)))
	}
	if len(c.UUIDs) > 0 {
		parts = append(parts, fmt.Sprintf("%s %q", keyCardUUIDs, strings.Join(c.UUIDs, ",")))
	}
	return strings.Join(parts, ", ")
}

// JoinModelPatterns is the patterns' texts joined by | (as the annotations write them).
func JoinModelPatterns(ps []ModelPattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Text
	}
	return strings.Join(s, "|")
}

// ModelPattern is one entry of a card-models list. The rule is by words, so
// that a short name is predictable and needs no vendor prefix:
//
// A model name is split into words at every character that is not an ASCII
// letter or digit; letters compare without regard to case. A pattern
// matches a model when every word of the pattern is a word of the model, in
// any order. Worked examples against NVML product names:
//
//	"H100"       matches "NVIDIA H100 80GB HBM3" and "NVIDIA H100 NVL"
//	"H100-80GB"  matches "NVIDIA H100 80GB HBM3" (words h100, 80gb)
//	"A100-80GB"  matches "NVIDIA A100-SXM4-80GB" and "NVIDIA A100 80GB PCIe",
//	             not "NVIDIA A100-SXM4-40GB"
//	"A10"        matches "NVIDIA A10", never "NVIDIA A100" (whole words, no substrings)
//	"L4"         matches "NVIDIA L4", never "NVIDIA L40S"
//	"NVIDIA A100-SXM4-40GB" (the full name) matches exactly that model
//
// The full name as the inventory (or `kubectl inspect gpushare`) shows it
// always matches itself.
type ModelPattern struct {
	// Text is the entry as written (spaces around it trimmed).
	Text string
	// words are Text's words, lower-cased.
	words []string
}

// ParseModelPattern reads one entry of a card-models list. It must contain
// at least one letter or digit.
func ParseModelPattern(s string) (ModelPattern, error) {
	s = strings.TrimSpace(s)
	p := ModelPattern{Text: s}
	for w := range modelWords(s) {
		p.words = append(p.words, strings.ToLower(w))
	}
	if len(p.words) == 0 {
		return ModelPattern{}, fmt.Errorf("%q has no letters or digits", s)
	}
	return p, nil
}

// Matches reports whether every word of the pattern is a word of model
// (see ModelPattern). It does not allocate.
func (p ModelPattern) Matches(model string) bool {
	if len(p.words) == 0 {
		return false
	}
	for _, want := range p.words {
		found := false
		for w := range modelWords(model) {
			if strings.EqualFold(w, want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// modelWords yields the words of s: maximal runs of ASCII letters and digits.
func modelWords(s string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		start := -1
		for i := 0; i <= len(s); i++ {
			alnum := i < len(s) && isASCIIAlnum(s[i])
			switch {
			case alnum && start < 0:
				start = i
			case !alnum && start >= 0:
				if !yield(s[start:i]) {
					return
				}
				start = -1
			}
		}
	}
}

func isASCIIAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// splitList splits an annotation value at "|" and ",", trimming spaces.
// An empty value or an empty entry is an error that says what to write.
func splitList(key, value, example string) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("%w: %s is empty: list at least one entry (e.g. %q) or remove the annotation", ErrInvalidPodAnnotation, key, example)
	}
	fields := strings.FieldsFunc(value, func(r rune) bool { return r == '|' || r == ',' })
	var out []string
	for _, f := range fields {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	if len(out) != strings.Count(value, "|")+strings.Count(value, ",")+1 {
		return nil, fmt.Errorf("%w: %s %q has an empty entry: separate entries with one \"|\" or \",\" (e.g. %q)", ErrInvalidPodAnnotation, key, value, example)
	}
	return out, nil
}

func parsePatterns(key, value string) ([]ModelPattern, error) {
	items, err := splitList(key, value, "H100|A100-80GB")
	if err != nil {
		return nil, err
	}
	out := make([]ModelPattern, 0, len(items))
	for _, it := range items {
		p, err := ParseModelPattern(it)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: entry %v; name models by words of their product name, e.g. \"H100\" or \"A100-80GB\"", ErrInvalidPodAnnotation, key, value, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// MaxCardChoiceBytes and MaxCardChoiceEntries bound each card-choice
// annotation (models, excluded models, card UUIDs). A node has at most a few
// dozen cards; a longer list is refused rather than carried into every
// node's filter reason and the pod's condition (a 228 kB UUID list became a
// 741 kB filter answer for three nodes). Refused values are not echoed.
const (
	MaxCardChoiceBytes   = 4096
	MaxCardChoiceEntries = 64
)

// checkChoiceSize refuses an oversized card-choice annotation, saying what
// to do instead.
func checkChoiceSize(key, value string) error {
	if len(value) > MaxCardChoiceBytes {
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d: name fewer cards or models (a node's cards fit easily), or pin by model instead of UUID", ErrInvalidPodAnnotation, key, len(value), MaxCardChoiceBytes)
	}
	if n := strings.Count(value, "|") + strings.Count(value, ",") + 1; n > MaxCardChoiceEntries {
		return fmt.Errorf("%w: %s lists %d entries, over the limit of %d: name fewer cards or models, or pin by model instead of UUID", ErrInvalidPodAnnotation, key, n, MaxCardChoiceEntries)
	}
	return nil
}

// cardChoiceFromPod reads the pod's card-choice and policy annotations (see
// Names.AnnotationCardModels and the keys beside it).
func (n Names) cardChoiceFromPod(pod *corev1.Pod) (CardChoice, string, error) {
	c := CardChoice{Domain: n.domain}
	var err error
	for _, key := range []string{n.AnnotationCardModels(), n.AnnotationExcludeCardModels(), n.AnnotationCardUUIDs()} {
		if v, ok := pod.Annotations[key]; ok {
			if err := checkChoiceSize(key, v); err != nil {
				return CardChoice{}, "", err
			}
		}
	}
	if v, ok := pod.Annotations[n.AnnotationCardModels()]; ok {
		if c.Models, err = parsePatterns(n.AnnotationCardModels(), v); err != nil {
			return CardChoice{}, "", err
		}
	}
	if v, ok := pod.Annotations[n.AnnotationExcludeCardModels()]; ok {
		if c.ExcludeModels, err = parsePatterns(n.AnnotationExcludeCardModels(), v); err != nil {
			return CardChoice{}, "", err
		}
	}
	if v, ok := pod.Annotations[n.AnnotationCardUUIDs()]; ok {
		if c.UUIDs, err = splitList(n.AnnotationCardUUIDs(), v, "GPU-1b6a…,GPU-77c0…"); err != nil {
			return CardChoice{}, "", err
		}
		for _, u := range c.UUIDs {
			if strings.ContainsFunc(u, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }) {
				return CardChoice{}, "", fmt.Errorf("%w: %s: %q is not a card UUID (it contains a space); separate UUIDs with \",\"", ErrInvalidPodAnnotation, n.AnnotationCardUUIDs(), u)
			}
		}
	}
	policy, ok := pod.Annotations[n.AnnotationPolicy()]
	if ok {
		policy = strings.TrimSpace(policy)
		if policy == "" {
			return CardChoice{}, "", fmt.Errorf("%w: %s is empty: name a policy (e.g. \"spread\") or remove the annotation to use the extender's default", ErrInvalidPodAnnotation, n.AnnotationPolicy())
		}
	}
	return c, policy, nil
}
