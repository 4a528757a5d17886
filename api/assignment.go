package api

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AssignmentVersion is the version of Assignment this package writes and reads.
const AssignmentVersion = 1

// AssignmentPhase is how far an assignment has got.
type AssignmentPhase string

const (
	// PhaseAssigned: the extender chose the cards and bound the pod; the
	// node's device plugin has not yet allocated them to the containers
	// ("pending" in the inspector).
	PhaseAssigned AssignmentPhase = "Assigned"
	// PhaseAllocated: the device plugin's Allocate gave every container its
	// card. If the kubelet's admission order made the plugin hand a container
	// a different card than the extender chose, the record was corrected to
	// the card the container actually has.
	PhaseAllocated AssignmentPhase = "Allocated"
)

// ContainerAssignment is the card one container gets.
type ContainerAssignment struct {
	// Name is the app container's name.
	Name string `json:"name"`
	// CardUUID and CardIndex name the card (both, so that either device-ID
	// strategy can be served and people can read it).
	CardUUID  string `json:"cardUUID"`
	CardIndex int    `json:"cardIndex"`
	// Units is the memory granted, in the Assignment's unit.
	Units int64 `json:"units"`
}

// Assignment is the record the extender writes on a pod at bind, before the
// Binding, in AnnotationAssignment.
//
// Trust: a record is only believed when it names the pod's own UID and the
// node the pod is bound to (Assignment.Matches). A pod's UID is made by the
// API server at creation, so an annotation copied into a manifest can never
// match; bind overwrites whatever a pod carried before. With a record key
// (signature.go) the record is also authenticated: Signature is an HMAC the
// extender (or the device plugin, for what it corrects) computed over the
// rest of the record.
type Assignment struct {
	Version    int                   `json:"version"`
	PodUID     types.UID             `json:"podUID"`
	Node       string                `json:"node"`
	Unit       MemoryUnit            `json:"unit"`
	Phase      AssignmentPhase       `json:"phase"`
	Containers []ContainerAssignment `json:"containers"`
	// WholeCards are the containers given whole cards (WholeResourceName),
	// one entry per such container. Omitted when empty, so a record without
	// whole cards is encoded (and signed) exactly as before the field existed.
	WholeCards []WholeCardAssignment `json:"wholeCards,omitempty"`
	// Signature authenticates the record (RecordKeys.Sign); empty where no
	// record key is configured, and then not checked.
	Signature string `json:"signature,omitempty"`
}

// ErrNoAssignment is returned (wrapped) when a pod carries no assignment.
var ErrNoAssignment = errors.New("pod has no assignment annotation (was it scheduled by the gpushare extender?)")

// ErrInvalidAssignment is returned (wrapped) for an assignment that does not
// decode, validate, or belong to the pod that carries it.
var ErrInvalidAssignment = errors.New("invalid GPU assignment")

// Validate checks the record's internal consistency.
func (a Assignment) Validate() error {
	if a.Version != AssignmentVersion {
		return fmt.Errorf("%w: version %d, this program reads version %d", ErrInvalidAssignment, a.Version, AssignmentVersion)
	}
	if a.PodUID == "" {
		return fmt.Errorf("%w: no pod UID", ErrInvalidAssignment)
	}
	if a.Node == "" {
		return fmt.Errorf("%w: no node", ErrInvalidAssignment)
	}
	if err := a.Unit.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAssignment, err)
	}
	switch a.Phase {
	case PhaseAssigned, PhaseAllocated:
	default:
		return fmt.Errorf("%w: unknown phase %q", ErrInvalidAssignment, a.Phase)
	}
	if len(a.Containers) == 0 && len(a.WholeCards) == 0 {
		return fmt.Errorf("%w: no containers", ErrInvalidAssignment)
	}
	names := map[string]bool{}
	for _, c := range a.Containers {
		if err := checkEntryName(names, c.Name, "a container"); err != nil {
			return err
		}
		switch {
		case c.CardUUID == "":
			return fmt.Errorf("%w: container %q has no card UUID", ErrInvalidAssignment, c.Name)
		case c.CardIndex < 0:
			return fmt.Errorf("%w: container %q has negative card index", ErrInvalidAssignment, c.Name)
		case c.Units <= 0 || c.Units > MaxUnits:
			return fmt.Errorf("%w: container %q has %d units, want 1..%d", ErrInvalidAssignment, c.Name, c.Units, MaxUnits)
		}
	}
	return a.validateWhole(names)
}

// checkEntryName checks the name of one entry of a record (what says which
// kind, e.g. "a container"): it is set and not among names, the entries
// already seen; it is then added to names.
func checkEntryName(names map[string]bool, name, what string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s has no name", ErrInvalidAssignment, what)
	case names[name]:
		return fmt.Errorf("%w: container %q appears twice", ErrInvalidAssignment, name)
	}
	names[name] = true
	return nil
}

// Container returns the assignment of the named container.
func (a Assignment) Container(name string) (ContainerAssignment, bool) {
	return first(a.Containers, func(c ContainerAssignment) bool { return c.Name == name })
}

// first returns the first of xs that match accepts.
func first[T any](xs []T, match func(T) bool) (T, bool) {
	if i := slices.IndexFunc(xs, match); i >= 0 {
		return xs[i], true
	}
	var zero T
	return zero, false
}

// Total is the sum of the containers' units.
func (a Assignment) Total() int64 {
	var t int64
	for _, c := range a.Containers {
		t += c.Units
	}
	return t
}

// matches checks that the record belongs to this pod: same UID, same node as
// the pod is bound to (when it is bound), one entry for exactly each app
// container that requests n.ResourceName, with the units it requests, and
// one whole-card entry for exactly each that requests n.WholeResourceName,
// with as many cards as it requests.
func (a Assignment) matches(n Names, pod *corev1.Pod) error {
	if pod == nil {
		return fmt.Errorf("%w: no pod", ErrInvalidAssignment)
	}
	if a.PodUID != pod.UID {
		return fmt.Errorf("%w: written for pod UID %q, this pod is %q", ErrInvalidAssignment, a.PodUID, pod.UID)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != a.Node {
		return fmt.Errorf("%w: written for node %q, pod is bound to %q", ErrInvalidAssignment, a.Node, pod.Spec.NodeName)
	}
	// The record is checked against the GPU part of RequestFromPod only.
	req, err := n.gpuRequest(pod)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAssignment, err)
	}
	whole, err := n.wholeRequest(pod)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAssignment, err)
	}
	if err := a.matchesWhole(n, whole); err != nil {
		return err
	}
	return matchGrants(n.resource, "units", req, func(c ContainerRequest) (string, int64) { return c.Name, c.Units },
		len(a.Containers), func(name string) (int64, bool) {
			c, ok := a.Container(name)
			return c.Units, ok
		})
}

// matchGrants checks one kind of a record's entries against the pod's
// request of resource: as many entries as containers asking for it, and for
// each container asking (its name and amount: ask), an entry granting that
// amount (granted looks it up by name). what names the amount's unit in
// errors ("units", "whole cards").
func matchGrants[R any, A int | int64](resource corev1.ResourceName, what string, asking []R, ask func(R) (string, A), entries int, granted func(name string) (A, bool)) error {
	if len(asking) != entries {
		return fmt.Errorf("%w: %d containers request %s, the record has %d", ErrInvalidAssignment, len(asking), resource, entries)
	}
	for _, r := range asking {
		name, want := ask(r)
		got, ok := granted(name)
		if !ok {
			return fmt.Errorf("%w: container %q requests %s but has no entry", ErrInvalidAssignment, name, resource)
		}
		if got != want {
			return fmt.Errorf("%w: container %q requests %d %s, the record grants %d", ErrInvalidAssignment, name, want, what, got)
		}
	}
	return nil
}

// EncodeAssignment validates a and returns its annotation value.
func EncodeAssignment(a Assignment) (string, error) { return encodeRecord(a, ErrInvalidAssignment) }

// DecodeAssignment parses and validates an annotation value. Valid values are remembered (the
// plugin reads every record of its node at each admission): a repeated one costs a copy.
func DecodeAssignment(s string) (Assignment, error) {
	if a, ok := decoded.get(s); ok {
		return a.Clone(), nil
	}
	a, err := decodeRecord[Assignment](s, ErrInvalidAssignment)
	if err == nil {
		decoded.put(s, a.Clone())
	}
	return a, err
}

// decoded holds the valid annotation values DecodeAssignment parsed.
var decoded = newMemo[string, Assignment](1 << 14)

// Clone is a copy of a that shares no slice with it.
func (a Assignment) Clone() Assignment {
	a.Containers = slices.Clone(a.Containers)
	a.WholeCards = slices.Clone(a.WholeCards)
	for i := range a.WholeCards {
		a.WholeCards[i].CardUUIDs = slices.Clone(a.WholeCards[i].CardUUIDs)
		a.WholeCards[i].CardIndexes = slices.Clone(a.WholeCards[i].CardIndexes)
	}
	return a
}

// AssignmentFromPod decodes the pod's assignment (n.AnnotationAssignment)
// and checks that it belongs to the pod (same UID and node, one entry for
// exactly each container asking for n's resources). A pod without one gives
// ErrNoAssignment; anything else wrong gives ErrInvalidAssignment.
func (n Names) AssignmentFromPod(pod *corev1.Pod) (Assignment, error) {
	if pod == nil {
		return Assignment{}, ErrNoAssignment
	}
	a, err := annotationRecord(pod.Annotations, n.AnnotationAssignment(), DecodeAssignment, func() error {
		return missingKey(ErrNoAssignment, "pod has no "+n.AnnotationAssignment()+" annotation (was it scheduled by the gpushare extender?)")
	})
	if err == nil {
		err = a.matches(n, pod)
	}
	if err != nil {
		return Assignment{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return a, nil
}

// Phrase returns an error that reads text and is sentinel (errors.Is): a
// sentinel (ErrNoAssignment, ErrInvalidRequest, ...) said with the
// configured names it is about, e.g. Phrase(ErrInvalidRequest, "invalid
// example.com/gpu-mem request").
func Phrase(sentinel error, text string) error { return phrased{sentinel, text} }

type phrased struct {
	sentinel error
	text     string
}

func missingKey(sentinel error, text string) error { return Phrase(sentinel, text) }

func (e phrased) Error() string { return e.text }
func (e phrased) Unwrap() error { return e.sentinel }
