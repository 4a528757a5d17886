package conflict

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/api"
)

func node(capacity map[corev1.ResourceName]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}
	for k, v := range capacity {
		n.Status.Capacity[k] = resource.MustParse(v)
	}
	return n
}

func TestCheckFindsAnotherGPUPlugin(t *testing.T) {
	alibaba, err := api.NewNames(api.DefaultDomain, api.AlibabaResourceName, "example.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		capacity map[corev1.ResourceName]string
		names    api.Names
		want     []corev1.ResourceName
	}{
		{name: "a node with no GPU plugin is free", names: api.DefaultNames()},
		{name: "a node with only gpushare's resources is free", capacity: map[corev1.ResourceName]string{"example.com/gpu-mem": "160", "example.com/gpu": "2"}, names: api.DefaultNames()},
		{name: "NVIDIA's device plugin is found", capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}, names: api.DefaultNames(), want: []corev1.ResourceName{"nvidia.com/gpu"}},
		{name: "Alibaba's device plugin is found under the default names", capacity: map[corev1.ResourceName]string{"aliyun.com/gpu-mem": "80", "aliyun.com/gpu-count": "2"}, names: api.DefaultNames(),
			want: []corev1.ResourceName{"aliyun.com/gpu-mem", "aliyun.com/gpu-count"}},
		{name: "in compatibility mode aliyun.com/gpu-mem is gpushare's own, but Alibaba's gpu-count still shows their plugin", capacity: map[corev1.ResourceName]string{"aliyun.com/gpu-mem": "80", "aliyun.com/gpu-count": "2"}, names: alibaba,
			want: []corev1.ResourceName{"aliyun.com/gpu-count"}},
		{name: "in compatibility mode gpushare's own aliyun.com/gpu-mem alone is free", capacity: map[corev1.ResourceName]string{"aliyun.com/gpu-mem": "80"}, names: alibaba},
		{name: "HAMi's device plugin is found", capacity: map[corev1.ResourceName]string{"nvidia.com/gpumem": "81920", "nvidia.com/gpucores": "100"}, names: api.DefaultNames(),
			want: []corev1.ResourceName{"nvidia.com/gpumem", "nvidia.com/gpucores"}},
		{name: "a resource the kubelet lists at 0 (its plugin gone) does not count", capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "0"}, names: api.DefaultNames()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []corev1.ResourceName
			for _, f := range Check(node(tc.capacity), tc.names) {
				got = append(got, f.Resource)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMessageSaysWhichPluginAndWhatToDo(t *testing.T) {
	msg := Message("gpu-1", Check(node(map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}), api.DefaultNames()))
	for _, want := range []string{"does not register on node gpu-1", "NVIDIA's device plugin", "nvidia.com/gpu=8", "Remove that plugin", "docs/migration.md"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
