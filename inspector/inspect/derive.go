package inspect

// What the builder derives for the view (view.go holds the JSON schema
// alone): a pod entry, a percentage, whether a node is listed.

import (
	"math/big"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// newPod is one container's share of a card; it is pending while its
// assignment is in phase Assigned.
func newPod(namespace, name, container string, units int64, phase api.AssignmentPhase) Pod {
	return Pod{Namespace: namespace, Name: name, Container: container, Units: units, Phase: phase, Pending: phase == api.PhaseAssigned}
}

// Percent is allocated/total in percent, rounded half up to a whole number;
// 0 when total is 0. Worked examples: 1/8 = 12.5% → 13 (truncation would say
// 12); 25/30 = 83.3% → 83; 2/3 = 66.7% → 67. Big integers keep it exact for
// any sum of int64 units.
func Percent(allocated, total int64) int64 {
	if total <= 0 || allocated <= 0 {
		return 0
	}
	// (200·a + t) / (2·t) = floor(100·a/t + 1/2).
	n := new(big.Int).Mul(big.NewInt(allocated), big.NewInt(200))
	n.Add(n, big.NewInt(total))
	n.Quo(n, new(big.Int).Mul(big.NewInt(total), big.NewInt(2)))
	return n.Int64()
}

// IsGPUNode reports whether the inspector lists the node: it has
// example.com/gpu-mem capacity (even 0), a gpushare inventory annotation,
// the gpushare=true label that asks for the device plugin, or the
// <domain>/dra=true label that asks for the node agent in DRA mode (Build
// also lists the nodes with a gpushare ResourceSlice or claims).
func IsGPUNode(names api.Names, n *corev1.Node) bool {
	if _, ok := n.Status.Capacity[names.ResourceName()]; ok {
		return true
	}
	if _, ok := n.Annotations[names.AnnotationInventory()]; ok {
		return true
	}
	return n.Labels[api.LabelEnabled] == api.LabelEnabledValue || isDRANode(names, n)
}

// isDRANode reports whether the node is labelled to serve its cards
// through DRA (api.Names.LabelDRA).
func isDRANode(names api.Names, n *corev1.Node) bool {
	return n.Labels[names.LabelDRA()] == api.LabelEnabledValue
}
