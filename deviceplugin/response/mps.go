package response

import (
	"fmt"
	"path/filepath"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
)

// MPS is the plugin's MPS mode (--mps): when Enabled, every container also
// gets NVIDIA MPS's per-client memory limit set to its grant, and the host's
// MPS pipe and shared-memory directories, so that the MPS server refuses
// allocations past the grant. The limit is an environment variable: a
// workload can override it; the memory sampler (--memory-enforcement) backs
// it up.
type MPS struct {
	Enabled bool
	// PipeDir and ShmDir are host directories: the MPS control daemon's
	// CUDA_MPS_PIPE_DIRECTORY and the shared memory its server uses.
	PipeDir, ShmDir string
}

// Validate checks an enabled MPS mode's directories.
func (m MPS) Validate() error {
	if !m.Enabled {
		return nil
	}
	for flag, d := range map[string]string{"memory.mpsPipeDir": m.PipeDir, "memory.mpsShmDir": m.ShmDir} {
		if d == "" || !filepath.IsAbs(d) {
			return fmt.Errorf("%s %q: MPS mode needs an absolute host path (where the MPS control daemon runs with it), e.g. /run/nvidia/mps", flag, d)
		}
	}
	return nil
}

// MPSLimit is the CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value for a grant of
// grantMiB on the container's only visible card (CUDA device 0): e.g. 10
// GiB is "0=10240M".
func MPSLimit(grantMiB int64) string { return "0=" + strconv.FormatInt(grantMiB, 10) + "M" }

// addTo adds MPS mode's environment and mounts to a container response.
func (m MPS) addTo(r *pluginapi.ContainerAllocateResponse, grantMiB int64) {
	if !m.Enabled {
		return
	}
	r.Envs[api.EnvMPSPinnedDeviceMemLimit] = MPSLimit(grantMiB)
	r.Envs[api.EnvMPSPipeDirectory] = api.MPSPipeContainerPath
	r.Mounts = append(r.Mounts,
		&pluginapi.Mount{ContainerPath: api.MPSPipeContainerPath, HostPath: m.PipeDir},
		&pluginapi.Mount{ContainerPath: api.MPSShmContainerPath, HostPath: m.ShmDir},
	)
}
