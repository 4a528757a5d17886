package api

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxWholeCards bounds a container's whole-card request. Real nodes have 8 or
// 16 cards; the bound only keeps absurd quantities out of the arithmetic.
// A request within it but above what a node has fails that node with a reason
// (never an error of the request: another node may have more cards).
const MaxWholeCards = 256

// ErrMixedRequest is returned (wrapped) by RequestFromPod for a container
// that asks for both ResourceName and WholeResourceName: a container gets
// either whole cards or a share of one card.
var ErrMixedRequest = errors.New("a container may ask for whole cards or memory on one card, not both")

// EnvWholeCards, in a container given whole cards, is how many (e.g. "2"; a container with a share of one card has none);
// there EnvCardUUID and EnvCardIndex hold comma-separated lists, one entry per
// card, and NVIDIA_VISIBLE_DEVICES names them all (one volume mount per card
// with the volume-mounts strategy).
const EnvWholeCards = "GPUSHARE_CARD_COUNT"

// WholeCardRequest is one app container's demand for whole cards.
type WholeCardRequest struct {
	// Name is the container's name in the pod spec.
	Name string
	// Cards is how many cards; always 1..MaxWholeCards.
	Cards int
}

// WholeCardTotal is the total number of whole cards the pod's containers ask for.
func (r PodRequest) WholeCardTotal() int {
	t := 0
	for _, c := range r.WholeCards {
		t += c.Cards
	}
	return t
}

// wholeRequest is PodRequest.WholeCards (see RequestFromPod): one entry per
// app container that asks for WholeResourceName, in spec order. Init
// containers may not ask for it (ErrInitContainerRequest), for the reason
// they may not ask for ResourceName; a container may not ask for both kinds.
func (n Names) wholeRequest(pod *corev1.Pod) ([]WholeCardRequest, error) {
	var out []WholeCardRequest
	err := eachAsk(pod, n.containerCards,
		func(name string, cards int) error {
			return fmt.Errorf("%w (nor %s): init container %q asks for %d whole cards", n.errInitContainer(), n.whole, name, cards)
		},
		func(c corev1.Container, cards int) error {
			if _, share := containerQuantity(c, n.resource); share {
				return fmt.Errorf("%w: container %q asks for both; put the whole cards and the shared memory in separate containers", missingKey(ErrMixedRequest, "a container may ask for "+string(n.whole)+" (whole cards) or "+string(n.resource)+" (memory on one card), not both"), c.Name)
			}
			out = append(out, WholeCardRequest{Name: c.Name, Cards: cards})
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// containerQuantity is the container's quantity of resource name, from its
// limits, else its requests (extended-resource rules).
func containerQuantity(c corev1.Container, name corev1.ResourceName) (resource.Quantity, bool) {
	q, ok := c.Resources.Limits[name]
	if !ok {
		q, ok = c.Resources.Requests[name]
	}
	return q, ok
}

// containerCards is the container's whole-card request: 0 when it does not
// name WholeResourceName, else 1..MaxWholeCards or an ErrInvalidRequest that
// says what to write instead.
func (n Names) containerCards(c corev1.Container) (int, error) {
	q, ok := containerQuantity(c, n.whole)
	if !ok {
		return 0, nil
	}
	switch {
	case q.Sign() < 0:
		return 0, fmt.Errorf("%w: container %q asks for %s %s, which is negative; ask for a whole number of cards from 1 to %d", n.errInvalid(), c.Name, q.String(), n.whole, MaxWholeCards)
	case q.IsZero():
		return 0, fmt.Errorf("%w: container %q asks for 0 %s; ask for at least 1 card, or leave %s out to ask for no whole card", n.errInvalid(), c.Name, n.whole, n.whole)
	case q.MilliValue()%1000 != 0:
		return 0, fmt.Errorf("%w: container %q asks for %s %s, which is not a whole number of cards; for part of a card ask for %s (memory) instead", n.errInvalid(), c.Name, q.String(), n.whole, n.resource)
	}
	v, ok := q.AsInt64()
	if !ok || v > MaxWholeCards {
		return 0, fmt.Errorf("%w: container %q asks for %s %s, more than the maximum %d cards", n.errInvalid(), c.Name, q.String(), n.whole, MaxWholeCards)
	}
	return int(v), nil
}

// WholeCardAssignment is the cards one container gets whole.
type WholeCardAssignment struct {
	// Name is the app container's name.
	Name string `json:"name"`
	// CardUUIDs and CardIndexes name the cards, in the same order (both, so
	// that either device-ID strategy can be served and people can read it).
	CardUUIDs   []string `json:"cardUUIDs"`
	CardIndexes []int    `json:"cardIndexes"`
}

// Cards is how many cards the container holds.
func (w WholeCardAssignment) Cards() int { return len(w.CardUUIDs) }

// WholeCard returns the whole-card grant of the named container.
func (a Assignment) WholeCard(name string) (WholeCardAssignment, bool) {
	return first(a.WholeCards, func(w WholeCardAssignment) bool { return w.Name == name })
}

// WholeCardUUIDs lists every card the record gives whole.
func (a Assignment) WholeCardUUIDs() []string {
	var out []string
	for _, w := range a.WholeCards {
		out = append(out, w.CardUUIDs...)
	}
	return out
}

// validateWhole checks the whole-card entries; names are the containers
// already seen in Containers.
func (a Assignment) validateWhole(names map[string]bool) error {
	shared := map[string]bool{}
	for _, c := range a.Containers {
		shared[c.CardUUID] = true
	}
	seen := map[string]string{}
	for _, w := range a.WholeCards {
		if err := checkEntryName(names, w.Name, "a whole-card container"); err != nil {
			return err
		}
		switch {
		case len(w.CardUUIDs) == 0 || len(w.CardUUIDs) > MaxWholeCards:
			return fmt.Errorf("%w: container %q has %d whole cards, want 1..%d", ErrInvalidAssignment, w.Name, len(w.CardUUIDs), MaxWholeCards)
		case len(w.CardIndexes) != len(w.CardUUIDs):
			return fmt.Errorf("%w: container %q has %d card UUIDs but %d card indexes", ErrInvalidAssignment, w.Name, len(w.CardUUIDs), len(w.CardIndexes))
		}
		for i, u := range w.CardUUIDs {
			switch {
			case u == "":
				return fmt.Errorf("%w: container %q has a whole card without UUID", ErrInvalidAssignment, w.Name)
			case w.CardIndexes[i] < 0:
				return fmt.Errorf("%w: container %q has a negative card index", ErrInvalidAssignment, w.Name)
			case seen[u] != "":
				return fmt.Errorf("%w: card %s is given whole to both container %q and %q", ErrInvalidAssignment, u, seen[u], w.Name)
			case shared[u]:
				return fmt.Errorf("%w: card %s is given whole to container %q and also holds shared memory", ErrInvalidAssignment, u, w.Name)
			}
			seen[u] = w.Name
		}
	}
	return nil
}

// matchesWhole checks the whole-card entries against the pod's request.
func (a Assignment) matchesWhole(n Names, req []WholeCardRequest) error {
	return matchGrants(n.whole, "whole cards", req, func(c WholeCardRequest) (string, int) { return c.Name, c.Cards },
		len(a.WholeCards), func(name string) (int, bool) {
			w, ok := a.WholeCard(name)
			return w.Cards(), ok
		})
}

// HoldsWhole reports whether the record gives card uuid whole.
func (a Assignment) HoldsWhole(uuid string) bool { return slices.Contains(a.WholeCardUUIDs(), uuid) }
