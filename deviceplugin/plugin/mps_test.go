package plugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/internal/podtest"
)

func TestMPSModeLimitsTheContainerToItsGrant(t *testing.T) {
	mps := response.MPS{Enabled: true, PipeDir: "/run/nvidia/mps", ShmDir: "/run/nvidia/mps/shm"}
	for _, strategy := range []response.Strategy{response.StrategyVolumeMounts, response.StrategyEnvvar} {
		t.Run(string(strategy), func(t *testing.T) {
			h := newHarness(t, setup{cfg: Config{Config: response.Config{Strategy: strategy, DeviceIDStrategy: response.DeviceIDUUID, MPS: mps}}, pods: func(c [2]podtest.Card) []*corev1.Pod {
				return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj()}
			}})
			r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 3))
			// 3 GiB granted (the harness's unit): 3072 MiB on CUDA device 0,
			// the container's only card.
			if got := r.Envs[api.EnvMPSPinnedDeviceMemLimit]; got != "0=3072M" {
				t.Errorf("%s = %q, want 0=3072M", api.EnvMPSPinnedDeviceMemLimit, got)
			}
			if got := r.Envs[api.EnvMPSPipeDirectory]; got != "/tmp/nvidia-mps" {
				t.Errorf("%s = %q, want /tmp/nvidia-mps", api.EnvMPSPipeDirectory, got)
			}
			var got []*pluginapi.Mount
			for _, m := range r.Mounts {
				if !strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot) {
					got = append(got, m)
				}
			}
			want := []*pluginapi.Mount{
				{ContainerPath: "/tmp/nvidia-mps", HostPath: "/run/nvidia/mps"},
				{ContainerPath: "/dev/shm", HostPath: "/run/nvidia/mps/shm"},
			}
			if d := cmp.Diff(want, got, cmp.Comparer(func(a, b *pluginapi.Mount) bool { return a.String() == b.String() })); d != "" {
				t.Errorf("MPS mounts (-want +got):\n%s", d)
			}
		})
	}
}

func TestMPSModeOffAddsNothing(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{Config: response.Config{Strategy: response.StrategyEnvvar, DeviceIDStrategy: response.DeviceIDUUID}}, pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 1).Assign(api.PhaseAssigned, c[1]).Obj()}
	}})
	r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 1))
	if _, ok := r.Envs[api.EnvMPSPinnedDeviceMemLimit]; ok || len(r.Mounts) != 0 {
		t.Errorf("MPS off: envs %v, mounts %v; want no MPS setting", r.Envs, r.Mounts)
	}
}
