package api

import "strconv"

// What a container that was allocated GPU memory (Names.ResourceName) finds in its
// environment. The device plugin sets these in its Allocate response; the e2e
// node agent and the docs read them. Frameworks may use the informational ones
// to size their memory pools; the device plugin watches memory in use from outside
// (docs/user-guide.md), and in MPS mode the MPS server enforces the limit.
const (
	// EnvNvidiaVisibleDevices is read by the NVIDIA container toolkit. With the
	// volume-mounts strategy it holds VisibleDevicesVolumeRoot; with the envvar
	// strategy the card's UUID or index.
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

	// VisibleDevicesVolumeRoot is the directory under which the volume-mounts
	// strategy mounts one entry per visible card (host /dev/null mounted at
	// VisibleDevicesVolumeRoot + "/" + UUID or index). The NVIDIA container
	// toolkit, with accept-nvidia-visible-devices-as-volume-mounts=true,
	// exposes exactly those cards.
	VisibleDevicesVolumeRoot = "/var/run/nvidia-container-devices"

	// EnvMemoryUnits is the number of units granted to the container, e.g. "10".
	EnvMemoryUnits = "GPUSHARE_MEMORY_UNITS"
	// EnvMemoryUnit is the unit of EnvMemoryUnits: "GiB" or "MiB".
	EnvMemoryUnit = "GPUSHARE_MEMORY_UNIT"
	// EnvMemoryMiB is the granted memory in MiB (units × unit size), e.g. "10240".
	EnvMemoryMiB = "GPUSHARE_MEMORY_MIB"
	// EnvCardMemoryMiB is the total memory of the card, in MiB, as NVML reports it.
	EnvCardMemoryMiB = "GPUSHARE_CARD_MEMORY_MIB"
	// EnvCardUUID is the UUID of the card the container got.
	EnvCardUUID = "GPUSHARE_CARD_UUID"
	// EnvCardIndex is the node-local index of the card the container got.
	EnvCardIndex = "GPUSHARE_CARD_INDEX"
)

// MPS mode (the device plugin's --mps): what a container finds when the node
// runs NVIDIA's MPS control daemon and the plugin hands its clients their
// limit.
const (
	// EnvMPSPinnedDeviceMemLimit is NVIDIA MPS's per-client device memory
	// limit: a comma-separated list of <device ordinal>=<value><unit>
	// (https://docs.nvidia.com/deploy/mps/latest/appendix-environment-variables.html,
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). The plugin writes "0=<grant in MiB>M":
	// the container sees one card, which CUDA enumerates as device 0.
	EnvMPSPinnedDeviceMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvMPSPipeDirectory tells the CUDA client where the MPS control
	// daemon's pipes are: MPSPipeContainerPath.
	EnvMPSPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"
	// MPSPipeContainerPath is where the plugin mounts the host's MPS pipe
	// directory (MPS's default, /tmp/nvidia-mps).
	MPSPipeContainerPath = "/tmp/nvidia-mps"
	// MPSShmContainerPath is where the plugin mounts the host's MPS shared
	// memory directory: MPS clients and server share memory through /dev/shm.
	MPSShmContainerPath = "/dev/shm"
)

// Alibaba compatibility: what a container finds besides the variables
// above when the memory resource is AlibabaResourceName, under the names
// Alibaba's gpushare device plugin uses, for workloads written for it (e.g.
// sizing a framework's memory pool as ALIYUN_COM_GPU_MEM_CONTAINER /
// ALIYUN_COM_GPU_MEM_DEV of the card). docs/migration.md explains why
// ALIYUN_COM_GPU_MEM_POD is not among them.
const (
	// EnvAlibabaCardIndex is the node-local index of the container's card.
	EnvAlibabaCardIndex = "ALIYUN_COM_GPU_MEM_IDX"
	// EnvAlibabaContainerUnits is the units granted to the container.
	EnvAlibabaContainerUnits = "ALIYUN_COM_GPU_MEM_CONTAINER"
	// EnvAlibabaCardUnits is the card's memory in units.
	EnvAlibabaCardUnits = "ALIYUN_COM_GPU_MEM_DEV"
)

// CompatEnv is the extra environment of a container granted units of the card
// with index cardIndex and cardUnits units: Alibaba's variables when n's
// memory resource is AlibabaResourceName, else none (nil).
func (n Names) CompatEnv(cardIndex int, units, cardUnits int64) map[string]string {
	if n.resource != AlibabaResourceName {
		return nil
	}
	return map[string]string{
		EnvAlibabaCardIndex:      strconv.Itoa(cardIndex),
		EnvAlibabaContainerUnits: strconv.FormatInt(units, 10),
		EnvAlibabaCardUnits:      strconv.FormatInt(cardUnits, 10),
	}
}
