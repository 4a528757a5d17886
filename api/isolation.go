package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Isolation is the set of cards an operator has taken out of service on a
// node, by index and/or by UUID. Isolated cards take no new pods; pods already
// on them are left alone.
//
// Two forms exist: the node annotation AnnotationIsolation ("0,GPU-5e1c…",
// see ParseIsolation) and a file read by the device plugin
// ({"index": [0], "uuid": ["GPU-5e1c…"]}, see ParseIsolationFile).
type Isolation struct {
	Index []int    `json:"index,omitempty"`
	UUID  []string `json:"uuid,omitempty"`
}

// Empty reports whether nothing is isolated.
func (iso Isolation) Empty() bool { return len(iso.Index) == 0 && len(iso.UUID) == 0 }

// Isolates reports whether the card with this index or UUID is isolated.
func (iso Isolation) Isolates(index int, uuid string) bool {
	for _, i := range iso.Index {
		if i == index {
			return true
		}
	}
	return slices.ContainsFunc(iso.UUID, func(u string) bool { return strings.EqualFold(u, uuid) })
}

// ReasonIsolatedByAnnotation is the Reason of a card that Apply isolates: the
// operator's annotation isolates it, and the device plugin has not reported
// it isolated yet.
const ReasonIsolatedByAnnotation = "isolate annotation; device plugin not updated yet"

// Apply returns the card as the extender places pods on it: a healthy card
// that iso isolates is CardIsolated (with ReasonIsolatedByAnnotation), at
// once, before the device plugin reports it so; any other card is as its
// inventory says (an unhealthy card stays unhealthy, its reason kept).
// The extender's cache and the inspector both decide a card's state here.
func (iso Isolation) Apply(c Card) Card {
	if c.State == CardHealthy && iso.Isolates(c.Index, c.UUID) {
		c.State, c.Reason = CardIsolated, ReasonIsolatedByAnnotation
	}
	return c
}

// Union returns the cards isolated by either.
func (iso Isolation) Union(other Isolation) Isolation {
	out := Isolation{Index: append(append([]int{}, iso.Index...), other.Index...), UUID: append(append([]string{}, iso.UUID...), other.UUID...)}
	return out.normalized()
}

// normalized has each index and UUID once, in ascending order (nil when
// there are none), in new slices.
func (iso Isolation) normalized() Isolation {
	return Isolation{Index: sortedSet(iso.Index), UUID: sortedSet(iso.UUID)}
}

// sortedSet is xs without repeats, ascending, in a new slice (nil when xs is
// empty).
func sortedSet[T cmp.Ordered](xs []T) []T { return slices.Compact(slices.Sorted(slices.Values(xs))) }

// String renders the annotation form: indexes first, then UUIDs.
func (iso Isolation) String() string {
	n := iso.normalized()
	parts := make([]string, 0, len(n.Index)+len(n.UUID))
	for _, i := range n.Index {
		parts = append(parts, strconv.Itoa(i))
	}
	parts = append(parts, n.UUID...)
	return strings.Join(parts, ",")
}

// ParseIsolation parses the annotation form: a comma-separated list whose
// items are card indexes ("0", "3") or UUIDs ("GPU-…", "MIG-…"). Blanks
// around items are ignored; an empty string isolates nothing.
func ParseIsolation(s string) (Isolation, error) {
	var iso Isolation
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if n, err := strconv.Atoi(item); err == nil {
			if n < 0 {
				return Isolation{}, fmt.Errorf("isolation: card index %d is negative", n)
			}
			iso.Index = append(iso.Index, n)
			continue
		}
		upper := strings.ToUpper(item)
		if !strings.HasPrefix(upper, "GPU-") && !strings.HasPrefix(upper, "MIG-") {
			return Isolation{}, fmt.Errorf("isolation: %q is neither a card index nor a GPU UUID (GPU-…)", item)
		}
		iso.UUID = append(iso.UUID, item)
	}
	return iso.normalized(), nil
}

// ParseIsolationFile parses the file form {"index": [...], "uuid": [...]}.
func ParseIsolationFile(b []byte) (Isolation, error) {
	var iso Isolation
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&iso); err != nil {
		return Isolation{}, fmt.Errorf("isolation file: %w (want {\"index\": [0, 1], \"uuid\": [\"GPU-…\"]})", err)
	}
	for _, i := range iso.Index {
		if i < 0 {
			return Isolation{}, fmt.Errorf("isolation file: card index %d is negative", i)
		}
	}
	return iso.normalized(), nil
}
