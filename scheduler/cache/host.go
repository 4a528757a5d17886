package cache

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// A pod's CPU and memory request is read by api.Names.RequestFromPod
// (PodRequest.Host); a node's allocatable CPU and memory here.

// hostAllocatable is the node's allocatable CPU and memory (MiB, rounded
// down); ok is false when the node reports no allocatable CPU.
func hostAllocatable(node *corev1.Node) (allocator.HostResources, bool) {
	cpu, ok := node.Status.Allocatable[corev1.ResourceCPU]
	if !ok {
		return allocator.HostResources{}, false
	}
	mem := node.Status.Allocatable[corev1.ResourceMemory]
	return allocator.HostResources{CPUMilli: cpu.MilliValue(), MemoryMiB: mem.Value() >> 20}, true
}
