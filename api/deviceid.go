package api

import (
	"fmt"
	"strconv"
	"strings"
)

// unitIDSeparator separates the card UUID from the unit number in a device
// unit ID.
const unitIDSeparator = "::"

// UnitID is the kubelet device ID of unit n (0-based) of the card with this
// UUID: "GPU-8a2f…::7". Qualifying IDs by card lets the kubelet's checkpoint,
// its PodResources API and the device plugin read which card a container holds.
func UnitID(cardUUID string, n int64) string {
	return cardUUID + unitIDSeparator + strconv.FormatInt(n, 10)
}

// ParseUnitID splits a device unit ID into card UUID and unit number.
func ParseUnitID(id string) (cardUUID string, n int64, err error) {
	i := strings.LastIndex(id, unitIDSeparator)
	if i <= 0 {
		return "", 0, fmt.Errorf("device ID %q is not of the form <card UUID>%s<unit>", id, unitIDSeparator)
	}
	n, err = strconv.ParseInt(id[i+len(unitIDSeparator):], 10, 64)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("device ID %q has no valid unit number", id)
	}
	return id[:i], n, nil
}
