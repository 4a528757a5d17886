package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func hostCtr(cpu, mem string) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}
}

func sidecar(cpu, mem string) corev1.Container {
	c := hostCtr(cpu, mem)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// TestHostRequest checks PodRequest.Host, the CPU and memory request
// RequestFromPod reads (moved from scheduler/cache, where it was HostRequest).
func TestHostRequest(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		want HostResources
	}{
		{"app containers add up", corev1.PodSpec{Containers: []corev1.Container{hostCtr("500m", "1Gi"), hostCtr("1500m", "1Gi")}},
			HostResources{CPUMilli: 2000, MemoryMiB: 2048}},
		{"a larger init container wins", corev1.PodSpec{InitContainers: []corev1.Container{hostCtr("3", "1Gi")}, Containers: []corev1.Container{hostCtr("500m", "1Gi"), hostCtr("1500m", "1Gi")}},
			HostResources{CPUMilli: 3000, MemoryMiB: 2048}},
		{"sidecars run beside the app containers", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("1", "512Mi"), hostCtr("2", "1Gi")}, Containers: []corev1.Container{hostCtr("1", "1Gi")}},
			HostResources{CPUMilli: 3000, MemoryMiB: 1536}},
		{"overhead is added", corev1.PodSpec{Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}, Containers: []corev1.Container{hostCtr("1", "1Mi")}},
			HostResources{CPUMilli: 1250, MemoryMiB: 1}},
		{"memory rounds up to whole MiB", corev1.PodSpec{Containers: []corev1.Container{hostCtr("0", "1572864")}},
			HostResources{MemoryMiB: 2}},
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, HostResources{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DefaultNames().RequestFromPod(&corev1.Pod{Spec: tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, req.Host); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestFromPodKeepsHostWhenGPUDemandIsInvalid(t *testing.T) {
	c := hostCtr("2", "1Gi")
	c.Resources.Limits = corev1.ResourceList{DefaultNames().ResourceName(): resource.MustParse("0")}
	req, err := DefaultNames().RequestFromPod(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}})
	if err == nil {
		t.Fatal("a container asking for 0 units: no error")
	}
	want := PodRequest{Host: HostResources{CPUMilli: 2000, MemoryMiB: 1024}}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
