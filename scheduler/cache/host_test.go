package cache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

func ctr(cpu, mem string) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}
}

func sidecar(cpu, mem string) corev1.Container {
	c := ctr(cpu, mem)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestHostRequest(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		want allocator.HostResources
	}{
		{"app containers add up", corev1.PodSpec{Containers: []corev1.Container{ctr("500m", "1Gi"), ctr("1500m", "1Gi")}},
			allocator.HostResources{CPUMilli: 2000, MemoryMiB: 2048}},
		{"a larger init container wins", corev1.PodSpec{InitContainers: []corev1.Container{ctr("3", "1Gi")}, Containers: []corev1.Container{ctr("500m", "1Gi"), ctr("1500m", "1Gi")}},
			allocator.HostResources{CPUMilli: 3000, MemoryMiB: 2048}},
		{"sidecars run beside the app containers", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("1", "512Mi"), ctr("2", "1Gi")}, Containers: []corev1.Container{ctr("1", "1Gi")}},
			allocator.HostResources{CPUMilli: 3000, MemoryMiB: 1536}},
		{"overhead is added", corev1.PodSpec{Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}, Containers: []corev1.Container{ctr("1", "1Mi")}},
			allocator.HostResources{CPUMilli: 1250, MemoryMiB: 1}},
		{"memory rounds up to whole MiB", corev1.PodSpec{Containers: []corev1.Container{ctr("0", "1572864")}},
			allocator.HostResources{MemoryMiB: 2}},
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, allocator.HostResources{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, HostRequest(&corev1.Pod{Spec: tc.spec})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
