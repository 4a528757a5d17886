package replay

import (
	"math"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/frag"
)

// Model names for gpushare-simulate's -policies: KubeSchedulerDRA and
// ExtenderScoredDRA.
const (
	DRAModelName       = "dra-default"
	DRAScoredModelName = "dra-frag"
)

// ExtenderScoredDRA models DRA claims whose node an extender scores with
// the frag policy while the DRA allocator still picks the card (first fit):
// frag's score of each node as it would be after the first-fit placement.
// It measures what node scoring alone would win back for DRA pods.
func ExtenderScoredDRA() *allocator.Policy {
	p := frag.DRA()
	p.Name = DRAScoredModelName
	p.Description = "model: an extender scores nodes with frag, the DRA allocator takes the first card that fits"
	return p
}

// KubeSchedulerDRA models how pods asking for GPU memory through DRA claims
// are placed without the extender (docs/dra.md): kube-scheduler 1.37's
// default scoring chooses the node and the DRA allocator the card.
//
//   - Node: the score plugins that tell nodes apart here are
//     NodeResourcesFit (LeastAllocated over CPU and memory, equal weights)
//     and NodeResourcesBalancedAllocation (1 − the standard deviation of the
//     CPU and memory fractions), weight 1 each, both on a 0..100 scale. The
//     DRA plugin scores only prioritized-list alternatives (0 here); nothing
//     scores GPU memory. Ties go to the lowest node position, as for every
//     replayed policy (kube-scheduler draws among them).
//   - Card: the allocator takes the first device of the slice, in order,
//     whose remaining memory holds the claim (first fit by card index); a
//     whole-card demand the first unused cards.
//
// It needs Node.HostAllocatable (the replay sets it); without it every node
// scores the same.
func KubeSchedulerDRA() *allocator.Policy {
	return &allocator.Policy{
		Name:            DRAModelName,
		Description:     "model: kube-scheduler's default scores choose the node, the DRA allocator the first card that fits",
		ChooseCard:      allocator.FirstFitCard,
		Score:           defaultHostScore,
		IgnoresWorkload: true,
	}
}

// defaultHostScore is LeastAllocated plus BalancedAllocation over CPU and
// memory once the pod is placed (0..200).
func defaultHostScore(node *allocator.Node, _ []int64, req allocator.Request, _ *allocator.Workload) float64 {
	if node.HostFree == nil || node.HostAllocatable == nil {
		return 0
	}
	a := node.HostAllocatable
	if a.CPUMilli <= 0 || a.MemoryMiB <= 0 {
		return 0
	}
	cpu := 1 - float64(node.HostFree.CPUMilli-req.Host.CPUMilli)/float64(a.CPUMilli) // fraction requested
	mem := 1 - float64(node.HostFree.MemoryMiB-req.Host.MemoryMiB)/float64(a.MemoryMiB)
	least := ((1 - cpu) + (1 - mem)) / 2 * 100
	mean := (cpu + mem) / 2
	std := math.Sqrt(((cpu-mean)*(cpu-mean) + (mem-mean)*(mem-mean)) / 2)
	return least + (1-std)*100
}
