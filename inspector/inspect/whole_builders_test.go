package inspect

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"testing"

	"github.com/gpushare/gpushare/api"
)

// wholeCardsScenario: a node of four cards, two given whole to one
// container of a mixed pod whose other container shares card 0, one pod
// pending on card 3 whole, and a pod that bypassed the scheduler. The
// kubelet's allocatable leaves out the units of cards 1 and 2, which the
// device plugin reports unhealthy while they are held whole.
func wholeCardsScenario(t *testing.T) []runtime.Object {
	return []runtime.Object{
		makeNode(t, "gpu-w", "10.0.7.1").inventory(api.UnitGiB, gpu("gpu-w", 0, a100, 40), gpu("gpu-w", 1, a100, 40), gpu("gpu-w", 2, a100, 40), gpu("gpu-w", 3, a100, 40)).capacity(160, 80).obj(),
		runningPod("ml", "train").GPU("infer", 10).Whole("trainer", 2).AssignWholeOn("gpu-w", api.PhaseAllocated, []int{0}, []int{1, 2}).Obj(),
		runningPod("ml", "next").Whole("main", 1).AssignWholeOn("gpu-w", api.PhaseAssigned, nil, []int{3}).Phase(corev1.PodPending).Obj(),
		runningPod("ml", "bypass").Whole("main", 1).Node("gpu-w").Obj(),
	}
}
