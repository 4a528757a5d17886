package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestKubeletDemandIsWhatTheKubeletAsksFor(t *testing.T) {
	res := DefaultNames().ResourceName()
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: resource.MustParse("2")}}}},
		Containers: []corev1.Container{
			{Name: "none"},
			{Name: "requests", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{res: resource.MustParse("1.5")}}},
			{Name: "zero", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: resource.MustParse("0")}}},
		},
	}}
	want := []ContainerRequest{{Name: "init", Units: 2}, {Name: "requests", Units: 2}, {Name: "zero", Units: 0}}
	if diff := cmp.Diff(want, KubeletDemand(pod, res)); diff != "" {
		t.Errorf("KubeletDemand (-want +got):\n%s", diff)
	}
}
