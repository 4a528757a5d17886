package kubeletnode

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// containerdConfig is containerd 1.6's configuration (version 2; containerd 2
// gets containerdConfigV3): its own
// root, state and socket; the CRI plugin with the test's sandbox image, the
// native snapshotter (no overlay mounts to leak), no CNI configuration (pods
// use the host network), and — with the NVIDIA runtime — nvidia-container-runtime
// as the runc shim's binary, the way NVIDIA's docs configure containerd.
func (o *Options) containerdConfig() string {
	if o.containerdMajor >= 2 {
		return o.containerdConfigV3()
	}
	binary := o.Runc
	if o.NvidiaRuntime != "" {
		binary = o.NvidiaRuntime
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.opt"]

[grpc]
  address = %q

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, o.path("containerd", "root"), o.path("containerd", "state"), o.ContainerdSocket(), o.PauseImage,
		binary, o.cniBinDir(), o.path("cni", "net.d")) + o.registryConfig(`plugins."io.containerd.grpc.v1.cri".registry`)
}

// registryConfig is the table that points containerd's CRI image service
// at RegistryConfigDir (nothing without one).
func (o *Options) registryConfig(table string) string {
	if o.RegistryConfigDir == "" {
		return ""
	}
	return fmt.Sprintf("  [%s]\n    config_path = %q\n", table, o.RegistryConfigDir)
}

func (o *Options) cniBinDir() string {
	if o.PodCIDR != "" {
		return o.CNIBinDir
	}
	return o.path("cni", "bin")
}

// cniConfig is the pod network: a bridge whose first address is the pods'
// gateway (the host), host-local addresses from PodCIDR, the loopback.
func (o *Options) cniConfig() ([]byte, error) {
	if _, _, err := net.ParseCIDR(o.PodCIDR); err != nil {
		return nil, fmt.Errorf("--pod-cidr: %w", err)
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       "gpushare-e2e",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": BridgeName, "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": o.PodCIDR}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 allowed
// (failCgroupV1: false: from 1.35 the kubelet refuses v1 otherwise), cgroupfs driver
// under the node's own cgroup root, containerd's socket, 127.0.0.1 ports,
// pod logs in the state directory, no image GC, only token eviction
// thresholds (the test machine's disk is not the subject), status posted
// every 10 s.
func (o *Options) kubeletConfig() ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupsPerQOS":            true,
		"cgroupRoot":               o.CgroupRoot,
		"containerRuntimeEndpoint": "unix://" + o.ContainerdSocket(),
		"address":                  "127.0.0.1",
		"port":                     o.KubeletPort,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              o.HealthzPort,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"failSwapOn":                  false,
		"podLogsDir":                  o.PodLogsDir(),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
		},
		"nodeStatusUpdateFrequency": "10s",
		// Post the status every 10 s even when nothing changed: tests wait
		// for a status posted after an event (a plugin's registration).
		"nodeStatusReportFrequency": "10s",
		"maxPods":                   30,
		"serializeImagePulls":       false,
		"registerNode":              true,
		"resolvConf":                "/etc/resolv.conf",
	}
	return yaml.Marshal(cfg)
}

func (o *Options) kubeletArgs() []string {
	args := []string{
		"--config", o.path("kubelet.yaml"),
		"--kubeconfig", o.Kubeconfig,
		"--hostname-override", o.NodeName,
		"--root-dir", "/var/lib/kubelet",
		"--cert-dir", "/var/lib/kubelet/pki",
		"-v", strconv.Itoa(o.KubeletVerbosity),
	}
	if o.Labels != "" {
		args = append(args, "--node-labels", o.Labels)
	}
	return args
}

// Toolkit settings, as docs/install.md tells operators to set them.
const (
	SettingVolumeMounts              = "accept-nvidia-visible-devices-as-volume-mounts"
	SettingEnvvarUnprivileged        = "accept-nvidia-visible-devices-envvar-when-unprivileged"
	cdiKind                          = "nvidia.com/gpu"
	nvidiaMajor               uint32 = 195
	nvidiactlMinor            uint32 = 255
)

// toolkitConfig is nvidia-container-runtime's config.toml: CDI mode with the
// node's CDI spec directory, runc as the low-level runtime, a debug log in the
// state directory, and the two settings of docs/install.md.
func (o *Options) toolkitConfig() string {
	return fmt.Sprintf(`%s = true
%s = %t

[nvidia-container-runtime]
debug = %q
log-level = "debug"
mode = "cdi"
runtimes = [%q]

[nvidia-container-runtime.modes.cdi]
default-kind = %q
spec-dirs = [%q]
annotation-prefixes = ["cdi.k8s.io/"]
`, SettingVolumeMounts, SettingEnvvarUnprivileged, o.AcceptEnvvarUnprivileged,
		o.path("nvidia-container-runtime", "runtime.log"), o.Runc, cdiKind, o.path("cdi"))
}

// SimulatedCard is a card of the node as the CDI spec describes it.
type SimulatedCard struct {
	Index int
	UUID  string
	// HostNode is the device node made for it in the state directory;
	// ContainerPath where a container that gets the card finds it.
	HostNode      string
	ContainerPath string
	Major, Minor  uint32
}

// Cards are the node's simulated cards: the plugin's --nvml=spec value, with
// the UUIDs the plugin derives from the node name.
func (o *Options) Cards() ([]SimulatedCard, error) {
	src, err := nvml.ParseSource("spec:" + o.GPUs)
	if err != nil {
		return nil, err
	}
	sim := nvml.NewSimulator(o.NodeName, src.GPUs...)
	cards := make([]SimulatedCard, len(src.GPUs))
	for i := range src.GPUs {
		uuid := sim.UUID(i)
		cards[i] = SimulatedCard{
			Index: i, UUID: uuid,
			HostNode:      o.path("dev", "nvidia-"+uuid),
			ContainerPath: fmt.Sprintf("/dev/nvidia%d", i),
			Major:         nvidiaMajor, Minor: uint32(i),
		}
	}
	return cards, nil
}

// NvidiactlPath is the control device every container with a card gets (the
// spec's common edits), as a generated NVIDIA CDI spec has it.
const NvidiactlPath = "/dev/nvidiactl"

// makeDevices creates one character device node per card, named by the card's
// UUID, plus nvidiactl, in the state directory (never in /dev).
func (o *Options) makeDevices(cards []SimulatedCard) error {
	dir := o.path("dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mk := func(path string, major, minor uint32) error {
		_ = os.Remove(path)
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", path, err)
		}
		return nil
	}
	for _, c := range cards {
		if err := mk(c.HostNode, c.Major, c.Minor); err != nil {
			return err
		}
	}
	return mk(filepath.Join(dir, "nvidiactl"), nvidiaMajor, nvidiactlMinor)
}

// cdiSpec describes the cards to the NVIDIA runtime: a device per card named
// by its UUID (what the plugin's volume mounts name), its index, and "all",
// each a device node whose host path is the node made for it; nvidiactl for
// every container that gets any.
func (o *Options) cdiSpec(cards []SimulatedCard) ([]byte, error) {
	type node struct {
		Path     string `json:"path"`
		HostPath string `json:"hostPath"`
		Type     string `json:"type"`
		Major    uint32 `json:"major"`
		Minor    uint32 `json:"minor"`
	}
	type edits struct {
		DeviceNodes []node `json:"deviceNodes"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	var devices []device
	var all []node
	for _, c := range cards {
		n := node{Path: c.ContainerPath, HostPath: c.HostNode, Type: "c", Major: c.Major, Minor: c.Minor}
		all = append(all, n)
		devices = append(devices,
			device{Name: c.UUID, ContainerEdits: edits{DeviceNodes: []node{n}}},
			device{Name: strconv.Itoa(c.Index), ContainerEdits: edits{DeviceNodes: []node{n}}})
	}
	devices = append(devices, device{Name: "all", ContainerEdits: edits{DeviceNodes: all}})
	spec := map[string]any{
		"cdiVersion": "0.5.0",
		"kind":       cdiKind,
		"devices":    devices,
		"containerEdits": edits{DeviceNodes: []node{{
			Path: NvidiactlPath, HostPath: o.path("dev", "nvidiactl"), Type: "c", Major: nvidiaMajor, Minor: nvidiactlMinor,
		}}},
	}
	return yaml.Marshal(spec)
}

// writeFiles writes every configuration file of the node.
func (o *Options) writeFiles() error {
	for _, d := range []string{"containerd/root", "containerd/state", "cni/bin", "cni/net.d", "pod-logs", "nvidia-container-runtime", "cdi"} {
		if err := os.MkdirAll(o.path(d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range o.CDISpecDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	kc, err := o.kubeletConfig()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"containerd.toml": []byte(o.containerdConfig()),
		"kubelet.yaml":    kc,
	}
	if o.PodCIDR != "" {
		if files["cni/net.d/10-gpushare.conflist"], err = o.cniConfig(); err != nil {
			return err
		}
	}
	if o.NvidiaRuntime != "" {
		cards, err := o.Cards()
		if err != nil {
			return err
		}
		if err := o.makeDevices(cards); err != nil {
			return err
		}
		spec, err := o.cdiSpec(cards)
		if err != nil {
			return err
		}
		files["cdi/gpushare-e2e.yaml"] = spec
		files["nvidia-container-runtime/config.toml"] = []byte(o.toolkitConfig())
	}
	for name, b := range files {
		if err := os.WriteFile(o.path(name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// envWith returns the environment with extra variables set.
func envWith(extra ...string) []string {
	env := os.Environ()
	for _, e := range extra {
		k, _, _ := strings.Cut(e, "=")
		for i := range env {
			if strings.HasPrefix(env[i], k+"=") {
				env = append(env[:i], env[i+1:]...)
				break
			}
		}
		env = append(env, e)
	}
	return env
}
