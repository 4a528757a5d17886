package allocate

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpushare/gpushare/api"
)

// Device IDs are parsed once, where the kubelet's call comes in, into one of
// two typed values: Units (a gpu-mem request: units of one card) or Cards (a
// whole-card request: distinct card UUIDs). Everything after the door takes
// the typed value.

// ErrSpansCards: the kubelet offered units of more than one card.
var ErrSpansCards = errors.New("device IDs span more than one card; a container's GPU memory must come from one card")

// ErrNoDeviceIDs: a container request carries no device IDs.
var ErrNoDeviceIDs = errors.New("no device IDs in the request")

// ErrBadDeviceID: a device ID is not of the form this plugin advertises.
var ErrBadDeviceID = errors.New("malformed device ID: gpushare device IDs are <card UUID>::<unit number>, e.g. \"" + api.UnitID("GPU-8a2f0c1e-52b4-4c07-9b1d-3f6e2a9c7d10", 7) + "\", as ListAndWatch advertises them")

// CheckIDs checks that every id is a unit ID (api.ParseUnitID); the error
// wraps ErrBadDeviceID and names the first bad one.
func CheckIDs(ids []string) error {
	for _, id := range ids {
		if _, _, err := api.ParseUnitID(id); err != nil {
			return fmt.Errorf("%w: %w", ErrBadDeviceID, err)
		}
	}
	return nil
}

// CardOf returns the single card all ids belong to. Errors wrap
// ErrNoDeviceIDs, ErrBadDeviceID or ErrSpansCards.
func CardOf(ids []string) (string, error) {
	u, err := ParseUnits(ids)
	return u.Card, err
}

// Units is one container request's gpu-mem device IDs, parsed: units of
// one card.
type Units struct {
	// Card is the UUID of the card every unit belongs to.
	Card string
	// IDs are the device IDs as the kubelet sent them.
	IDs []string
	// Numbers are the unit numbers, in the order of IDs.
	Numbers []int64
}

// ParseUnits parses a container request's device IDs (see CardOf for the
// errors).
func ParseUnits(ids []string) (Units, error) {
	if len(ids) == 0 {
		return Units{}, ErrNoDeviceIDs
	}
	u := Units{IDs: ids, Numbers: make([]int64, 0, len(ids))}
	for _, id := range ids {
		c, n, err := api.ParseUnitID(id)
		if err != nil {
			return Units{}, fmt.Errorf("%w: %w", ErrBadDeviceID, err)
		}
		if u.Card != "" && c != u.Card {
			return Units{}, fmt.Errorf("%w: %s and %s (the kubelet gives units of several cards only when no card of the node has the units free: the room planned for the pod went to another pod; recreate the pod so that gpushare-scheduler places it again)", ErrSpansCards, u.Card, c)
		}
		u.Card = c
		u.Numbers = append(u.Numbers, n)
	}
	return u, nil
}

// Size is the number of units asked for.
func (u Units) Size() int64 { return int64(len(u.IDs)) }

// ErrCardID: a whole-card device ID list is empty or names a card twice.
var ErrCardID = errors.New("not a whole-card device of this plugin")

// Cards is one container request's whole-card device IDs, parsed: card
// UUIDs, distinct, sorted.
type Cards []string

// ParseCards sorts ids and checks that they are not empty and name
// distinct cards of the node (known; resource names the whole-card resource
// in the message). Errors wrap ErrCardID.
func ParseCards(ids []string, known func(uuid string) bool, resource string) (Cards, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no device IDs", ErrCardID)
	}
	out := append(Cards(nil), ids...)
	sort.Strings(out)
	for i, id := range out {
		if !known(id) {
			return nil, fmt.Errorf("%w: device ID %q is not the UUID of a card on this node; %s devices are card UUIDs such as GPU-…", ErrCardID, id, resource)
		}
		if i > 0 && out[i-1] == id {
			return nil, fmt.Errorf("%w: card %s appears twice", ErrCardID, id)
		}
	}
	return out, nil
}
