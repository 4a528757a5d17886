package nodeagent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/deviceplugin/usage"
)

func TestParseGPUUse(t *testing.T) {
	got, err := parseGPUUse("c0=6144, side=1024@1, trap=512@0+ignore-sigterm")
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuUse{{container: "c0", mib: 6144, card: -1}, {container: "side", mib: 1024, card: 1}, {container: "trap", mib: 512, card: 0, ignoreTERM: true}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(gpuUse{})); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, bad := range []string{"c0", "c0=lots", "=5", "c0=5@x"} {
		if _, err := parseGPUUse(bad); err == nil || !strings.Contains(err.Error(), "e2e-gpu-use") {
			t.Errorf("parseGPUUse(%q) err = %v", bad, err)
		}
	}
}

// The container ID in the status and the cgroup the agent makes must be
// what the device plugin's cgroup parser reads back.
func TestSimulatedCgroupIsReadByThePlugin(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"}}
	id := simContainerID(pod, "c0")
	line := "4:cpu:/gpushare-e2e-n/kubepods/burstable/pod" + string(pod.UID) + "/" + id + "\n"
	o := usage.ParseCgroup([]byte(line))
	if o.PodUID != pod.UID || o.ContainerID != id || containerID(pod, "c0") != "containerd://"+id {
		t.Errorf("owner %+v, status ID %s; want pod %s container %s", o, containerID(pod, "c0"), pod.UID, id)
	}
}
