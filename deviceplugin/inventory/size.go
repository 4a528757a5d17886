package inventory

import (
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// MaxMessageBytes is the largest gRPC message the kubelet accepts from a
// device plugin (gRPC's default receive limit, 4 MiB).
const MaxMessageBytes = 4 << 20

// ListAndWatchBytes is the protobuf-encoded size of the largest
// ListAndWatchResponse the plugin can send for these cards in this unit (all
// devices listed, every one "Unhealthy", the longer health string).
//
// Each device is one repeated field: tag (1 byte) + length varint + the
// Device message, which is ID (1 + varint + len) and Health (1 + 1 + 9).
// Worked example: 8 cards of 40 GiB in MiB units = 327,680 devices with IDs
// "GPU-<36 characters>::<n>" of 43 to 47 bytes; the largest Device is
// 2+47 + 2+9 = 60 bytes, 62 with its tag and length; the message is
// 20,227,280 bytes — almost five times the limit, so the plugin refuses
// --memory-unit MiB on that node. One such card alone (2,528,410 bytes) fits;
// in GiB units the 8 cards take 18,800 bytes.
func ListAndWatchBytes(unit api.MemoryUnit, cards []nvml.Card) int64 {
	var total int64
	for _, c := range cards {
		units := unit.UnitsFromMiB(c.MemoryMiB)
		for n := int64(0); n < units; {
			// Devices whose unit number has the same number of digits have the
			// same size: count them in one step.
			digits := int64(len(fmt.Sprint(n)))
			end := pow10(digits)
			if end > units {
				end = units
			}
			id := int64(len(api.UnitID(c.UUID, n)))
			dev := 1 + varintLen(id) + id + 1 + varintLen(int64(len(pluginapi.Unhealthy))) + int64(len(pluginapi.Unhealthy))
			total += (end - n) * (1 + varintLen(dev) + dev)
			n = end
		}
	}
	return total
}

// CheckMessageSize refuses a unit so small that ListAndWatch would exceed the
// kubelet's message limit.
func CheckMessageSize(unit api.MemoryUnit, cards []nvml.Card) error {
	if b := ListAndWatchBytes(unit, cards); b > MaxMessageBytes {
		return fmt.Errorf("--memory-unit %s: %d devices on this node would make a ListAndWatch message of %d bytes, over the kubelet's limit of %d bytes: use a larger unit (--memory-unit GiB)", unit, totalUnits(unit, cards), b, MaxMessageBytes)
	}
	return nil
}

func totalUnits(unit api.MemoryUnit, cards []nvml.Card) int64 {
	var t int64
	for _, c := range cards {
		t += unit.UnitsFromMiB(c.MemoryMiB)
	}
	return t
}

func pow10(d int64) int64 {
	p := int64(1)
	for i := int64(0); i < d; i++ {
		p *= 10
	}
	return p
}

func varintLen(v int64) int64 {
	n := int64(1)
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
