package cache

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// HostRequest is the pod's CPU and memory request as kube-scheduler's
// NodeResourcesFit counts it: the app containers plus restartable init
// containers (sidecars), or the largest regular init container (with the
// sidecars started before it) if that is more, plus the pod overhead.
//
// Worked example: app containers of 500m and 1500m, an init container of
// 3 CPU: max(2000m, 3000m) = 3000m. Memory is in MiB, rounded up (a request
// of 1.5 MiB counts 2).
func HostRequest(pod *corev1.Pod) allocator.HostResources {
	var cpu, mem int64 // millicores, bytes
	var sideCPU, sideMem, initCPU, initMem int64
	for _, c := range pod.Spec.InitContainers {
		rc, rm := c.Resources.Requests.Cpu().MilliValue(), c.Resources.Requests.Memory().Value()
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sideCPU += rc
			sideMem += rm
			continue
		}
		initCPU = max(initCPU, sideCPU+rc)
		initMem = max(initMem, sideMem+rm)
	}
	for _, c := range pod.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	cpu, mem = max(cpu+sideCPU, initCPU), max(mem+sideMem, initMem)
	if pod.Spec.Overhead != nil {
		cpu += pod.Spec.Overhead.Cpu().MilliValue()
		mem += pod.Spec.Overhead.Memory().Value()
	}
	return allocator.HostResources{CPUMilli: cpu, MemoryMiB: (mem + 1<<20 - 1) >> 20}
}

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
