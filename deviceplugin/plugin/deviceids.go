package plugin

import (
	"errors"
	"fmt"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// errNotAdvertised: the IDs are of one known card but name units this
// plugin never advertised in ListAndWatch. The kubelet only hands out
// advertised units, once each, so such a call is a peer's mistake
// (InvalidArgument), not a container to match.
var errNotAdvertised = errors.New("device IDs name units this plugin does not advertise")

// checkAdvertised reports whether every one of u's IDs, all of card (as
// allocate.ParseUnits found), is a unit ListAndWatch advertises for it
// (inventory.Store.Devices: api.UnitID(card, n) for n below the card's
// units), each named once.
func checkAdvertised(card nvml.Card, unit api.MemoryUnit, u allocate.Units) error {
	units := unit.UnitsFromMiB(card.MemoryMiB)
	seen := make(map[int64]bool, len(u.IDs))
	for i, id := range u.IDs {
		n := u.Numbers[i]
		switch {
		case id != api.UnitID(card.UUID, n):
			return fmt.Errorf("%w: %q is not spelled as advertised (%q)", errNotAdvertised, id, api.UnitID(card.UUID, n))
		case n >= units:
			return fmt.Errorf("%w: unit %d of card %s, which has %d units (0 to %d)", errNotAdvertised, n, card.UUID, units, units-1)
		case seen[n]:
			return fmt.Errorf("%w: %q is named twice", errNotAdvertised, id)
		}
		seen[n] = true
	}
	return nil
}
