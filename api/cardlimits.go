package api

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// The card-limits ConfigMap tells the admission policy how large a request can
// ever be. The extender keeps it up to date from the nodes' inventories
// (scheduler/cardlimits); the chart's ValidatingAdmissionPolicy
// "gpushare-request-size" reads it as its parameter and refuses, at pod
// creation, a container that asks more than the largest card in the cluster
// has: such a pod could never run, and would otherwise pend with
// kube-scheduler's bare "Insufficient <resource name>".
const (
	// CardLimitsConfigMap is the ConfigMap's default name (in the namespace
	// the chart is installed in).
	CardLimitsConfigMap = "gpushare-card-limits"
	// CardLimitsKeyMaxUnits holds the largest card's capacity in units, as a
	// decimal integer, e.g. "79". Absent when no node has an inventory (then
	// nothing is refused for its size).
	CardLimitsKeyMaxUnits = "maxUnitsPerCard"
	// CardLimitsKeyUnit holds the unit of CardLimitsKeyMaxUnits when every
	// inventory uses the same one ("GiB"), or "mixed".
	CardLimitsKeyUnit = "unit"
	// CardLimitsKeyModel holds the model of the largest card, for the denial
	// message.
	CardLimitsKeyModel = "model"
)

// CardLimits is what the card-limits ConfigMap says.
type CardLimits struct {
	// MaxUnits is the largest capacity of one card, in its node's unit; 0
	// when no node has a valid inventory.
	MaxUnits int64
	// Unit is the unit every inventory uses, or "mixed" when they differ.
	Unit string
	// Model is the model of (one of) the largest cards.
	Model string
}

// CardLimitsFromNodes computes CardLimits over every card in every valid
// inventory: unhealthy and isolated cards count, since they may come back and
// the bound is about what could ever fit. Nodes without an inventory, or with
// one that does not decode, are skipped.
func (n Names) CardLimitsFromNodes(nodes []*corev1.Node) CardLimits {
	var l CardLimits
	for _, node := range nodes {
		inv, err := n.InventoryFromNode(node)
		if err != nil {
			continue
		}
		for _, c := range inv.Cards {
			if c.Units > l.MaxUnits || (c.Units == l.MaxUnits && c.Units > 0 && c.Model < l.Model) {
				l.MaxUnits, l.Model = c.Units, c.Model
			}
		}
		if len(inv.Cards) == 0 {
			continue
		}
		switch {
		case l.Unit == "":
			l.Unit = string(inv.Unit)
		case l.Unit != string(inv.Unit):
			l.Unit = "mixed"
		}
	}
	return l
}

// Data is the ConfigMap data that says l. Empty when nothing is known.
func (l CardLimits) Data() map[string]string {
	if l.MaxUnits <= 0 {
		return map[string]string{}
	}
	d := map[string]string{CardLimitsKeyMaxUnits: strconv.FormatInt(l.MaxUnits, 10), CardLimitsKeyUnit: l.Unit}
	if l.Model != "" {
		d[CardLimitsKeyModel] = l.Model
	}
	return d
}
