package kubeletnode

import (
	"fmt"
	"runtime"
	"strings"
)

// containerdConfigV3 is containerd 2's configuration (version 3: containerd
// 2.0's; 2.4 migrates it at start, with a warning in its log), the same
// node as containerdConfig's: its own root, state and socket, the CRI
// plugin with the test's sandbox image and the native snapshotter, runc's shim
// running nvidia-container-runtime when there is one. On top, what containerd
// 2 brings: the transfer service unpacking imported images (ctr images
// import) into the native snapshotter, for this machine's platform; CDI, always on, reading the node's NVIDIA spec and CDISpecDirs —
// the specs of the CDI devices the kubelet names for a container's DRA
// claims — and NRI switched off (its socket would be the host's
// /var/run/nri/nri.sock, shared with any other containerd).
func (o *Options) containerdConfigV3() string {
	binary := o.Runc
	if o.NvidiaRuntime != "" {
		binary = o.NvidiaRuntime
	}
	dirs := []string{fmt.Sprintf("%q", o.path("cdi"))}
	for _, d := range o.CDISpecDirs {
		dirs = append(dirs, fmt.Sprintf("%q", d))
	}
	return fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]

[grpc]
  address = %q

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.transfer.v1.local"]
  [[plugins."io.containerd.transfer.v1.local".unpack_config]]
    platform = "linux/%s"
    snapshotter = "native"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  cdi_spec_dirs = [%s]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
`, o.path("containerd", "root"), o.path("containerd", "state"), o.ContainerdSocket(), runtime.GOARCH, o.PauseImage,
		strings.Join(dirs, ", "), binary, o.cniBinDir(), o.path("cni", "net.d")) + o.registryConfig(`plugins."io.containerd.cri.v1.images".registry`)
}
