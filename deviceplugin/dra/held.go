package dra

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// Held is the memory that pods placed through the device plugin hold on
// each card (card index → units of unit), from their assignment records: a
// node moved from the device plugin to DRA keeps running those pods, and
// their memory is not offered to claims until they finish. A record's units
// in another unit are converted, rounded up; a card given whole is held
// whole (its inventory units). Records are counted whether or not they are
// signed: a wrong one can only withhold memory on its own node.
func Held(names api.Names, inv api.Inventory, node string, pods []*corev1.Pod) map[int]int64 {
	held := map[int]int64{}
	for _, pod := range pods {
		if pod.Spec.NodeName != node || !api.HoldsUnits(pod) {
			continue
		}
		a, err := names.TrustedAssignment(pod, api.RecordKeys{}) // any record, signed or not
		if err != nil || a.Node != node {
			continue
		}
		for _, c := range a.Containers {
			held[c.CardIndex] += api.ConvertUnitsUp(c.Units, a.Unit, inv.Unit)
		}
		for _, w := range a.WholeCards {
			for _, i := range w.CardIndexes {
				if card, ok := inv.Card(i); ok {
					held[i] += card.Units
				}
			}
		}
	}
	return held
}
