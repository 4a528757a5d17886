package kubeletnode

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Options are the node program's settings.
type Options struct {
	// NodeName is the Node the kubelet registers; Kubeconfig its API access.
	NodeName   string
	Kubeconfig string
	// StateDir holds everything of this node (see the Paths methods).
	StateDir string
	// Kubelet, Containerd, Ctr, Runc are the binaries.
	Kubelet    string
	Containerd string
	Ctr        string
	Runc       string
	// NvidiaRuntime is nvidia-container-runtime; empty: containerd runs runc
	// directly and no CDI spec or device node is made.
	NvidiaRuntime string
	// CDISpecDirs are more directories of CDI specs for containerd, besides
	// the node's NVIDIA spec (e.g. a DRA driver's --dra-cdi-dir). containerd 2
	// applies the CDI devices the kubelet names for DRA claims; containerd 1.6
	// ignores them, so these need containerd 2.
	CDISpecDirs []string
	// AcceptEnvvarUnprivileged is the starting value of the toolkit's
	// accept-nvidia-visible-devices-envvar-when-unprivileged (docs/install.md: false).
	AcceptEnvvarUnprivileged bool
	// GPUs is the device plugin's --nvml=spec:... value, from which the CDI
	// spec and the device nodes are made (UUIDs derived from NodeName, as the
	// plugin derives them).
	GPUs string
	// Images are OCI archives imported into containerd's k8s.io namespace;
	// PauseImage is the sandbox image's name (one of them).
	Images     []string
	PauseImage string
	// KubeletPort and HealthzPort: the kubelet's ports on 127.0.0.1.
	KubeletPort int
	HealthzPort int
	// CgroupRoot is the kubelet's cgroup root (cgroupfs driver), created in
	// every cgroup v1 hierarchy and removed at the end. Unique per node.
	CgroupRoot string
	// Labels are the Node's labels (--node-labels).
	Labels string
	// Plugin and PluginArgs: the device plugin (empty: none).
	Plugin     string
	PluginArgs []string
	// containerdMajor is the major version `containerd --version` reports
	// (Complete): 1 gets a version 2 configuration, 2 a version 3 one.
	containerdMajor int
	// KubeletVerbosity is the kubelet's -v.
	KubeletVerbosity int
	// PodCIDR gives pods a network: a CNI bridge (BridgeName, gateway the
	// first address) with host-local addresses from PodCIDR, through the CNI
	// plugins in CNIBinDir (Debian's: /usr/lib/cni). Empty: no CNI
	// configuration; only hostNetwork pods start and the Node is not Ready.
	PodCIDR   string
	CNIBinDir string
	// RegistryConfigDir is containerd's registry host configuration
	// directory (config_path: <host:port>/hosts.toml, with a registry's CA);
	// empty: none, containerd's defaults.
	RegistryConfigDir string
}

// BridgeName is the CNI bridge a node with a PodCIDR gets.
const BridgeName = "gpushare0"

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node", "", "Node name the kubelet registers")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	fs.StringVar(&o.StateDir, "state-dir", "", "this node's directory (required)")
	fs.StringVar(&o.Kubelet, "kubelet", "", "kubelet binary (required)")
	fs.StringVar(&o.Containerd, "containerd", "containerd", "containerd binary")
	fs.StringVar(&o.Ctr, "ctr", "ctr", "ctr binary (image import, cleanup)")
	fs.StringVar(&o.Runc, "runc", "runc", "runc binary")
	fs.StringVar(&o.NvidiaRuntime, "nvidia-runtime", "", "nvidia-container-runtime binary: containerd's runtime in CDI mode (empty: plain runc)")
	fs.Func("cdi-spec-dir", "more CDI spec directory for containerd, e.g. a DRA driver's (repeatable; needs containerd 2)", func(s string) error { o.CDISpecDirs = append(o.CDISpecDirs, s); return nil })
	fs.BoolVar(&o.AcceptEnvvarUnprivileged, "accept-envvar-unprivileged", false, "initial accept-nvidia-visible-devices-envvar-when-unprivileged")
	fs.StringVar(&o.GPUs, "gpus", "", "simulated cards, the device plugin's --nvml=spec: value (CDI spec and device nodes)")
	fs.Func("image", "OCI archive to import (repeatable)", func(s string) error { o.Images = append(o.Images, s); return nil })
	fs.StringVar(&o.PauseImage, "pause-image", "", "sandbox image name (required)")
	fs.IntVar(&o.KubeletPort, "kubelet-port", 0, "kubelet port on 127.0.0.1 (required)")
	fs.IntVar(&o.HealthzPort, "healthz-port", 0, "kubelet healthz port on 127.0.0.1 (required)")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", "", "kubelet cgroup root, unique per node (required)")
	fs.StringVar(&o.Labels, "labels", "", "node labels k=v,k2=v2")
	fs.StringVar(&o.Plugin, "plugin", "", "device plugin binary; its arguments follow \"--\"")
	fs.IntVar(&o.KubeletVerbosity, "kubelet-v", 2, "kubelet log verbosity")
	fs.StringVar(&o.PodCIDR, "pod-cidr", "", "pod network (CNI bridge "+BridgeName+", host-local addresses), e.g. 10.244.0.0/24; empty: host network only")
	fs.StringVar(&o.CNIBinDir, "cni-bin-dir", "/usr/lib/cni", "CNI plugin binaries (with --pod-cidr)")
	fs.StringVar(&o.RegistryConfigDir, "registry-config-dir", "", "containerd's registry config_path (<host:port>/hosts.toml per registry); empty: none")
}

// Complete checks the options and makes paths absolute.
func (o *Options) Complete(args []string) error {
	o.PluginArgs = args
	var missing []string
	for name, v := range map[string]string{"--node": o.NodeName, "--kubeconfig": o.Kubeconfig, "--state-dir": o.StateDir,
		"--kubelet": o.Kubelet, "--pause-image": o.PauseImage, "--cgroup-root": o.CgroupRoot} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if o.KubeletPort == 0 || o.HealthzPort == 0 {
		missing = append(missing, "--kubelet-port/--healthz-port")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if !strings.HasPrefix(o.CgroupRoot, "/") || strings.Count(o.CgroupRoot, "/") != 1 || strings.Contains(o.CgroupRoot, "..") {
		return fmt.Errorf("--cgroup-root %q: want one absolute path element, e.g. /gpushare-e2e-1234", o.CgroupRoot)
	}
	if o.NvidiaRuntime != "" && o.GPUs == "" {
		return errors.New("--nvidia-runtime needs --gpus (the cards to describe in the CDI spec)")
	}
	for _, p := range []*string{&o.StateDir, &o.Kubeconfig} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, p := range []*string{&o.Kubelet, &o.Containerd, &o.Ctr, &o.Runc, &o.NvidiaRuntime, &o.Plugin} {
		if *p == "" {
			continue
		}
		abs, err := lookPath(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for i, d := range o.CDISpecDirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return err
		}
		o.CDISpecDirs[i] = abs
	}
	major, err := containerdMajor(o.Containerd)
	if err != nil {
		return err
	}
	o.containerdMajor = major
	if len(o.CDISpecDirs) > 0 && major < 2 {
		return fmt.Errorf("--cdi-spec-dir: %s is containerd %d, which ignores the CDI devices the kubelet names; use containerd 2 (hack/container-lane.sh builds it with LANE_CONTAINERD2=1)", o.Containerd, major)
	}
	return nil
}

// containerdMajor runs `containerd --version` ("containerd
// github.com/containerd/containerd/v2 v2.4.2 ..." or "containerd
// github.com/containerd/containerd 1.6.20~ds1 ...") and returns the major
// version.
func containerdMajor(bin string) (int, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", bin, err)
	}
	return parseContainerdMajor(string(out))
}

func parseContainerdMajor(version string) (int, error) {
	f := strings.Fields(version)
	if len(f) < 3 {
		return 0, fmt.Errorf("containerd --version: unexpected %q", strings.TrimSpace(version))
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(f[2], "v"), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0, fmt.Errorf("containerd --version: no version in %q", strings.TrimSpace(version))
	}
	return n, nil
}

func lookPath(p string) (string, error) {
	if !strings.Contains(p, "/") {
		for _, dir := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/sbin") {
			c := filepath.Join(dir, p)
			if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return c, nil
			}
		}
		return "", fmt.Errorf("%s: not found in PATH", p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// Paths below the state directory.
func (o *Options) path(elem ...string) string {
	return filepath.Join(append([]string{o.StateDir}, elem...)...)
}

// ContainerdSocket is containerd's gRPC socket.
func (o *Options) ContainerdSocket() string { return o.path("containerd.sock") }

// ToolkitConfig is nvidia-container-runtime's config.toml (the runtime reads
// it at every container create; NVIDIA_CTK_CONFIG_FILE_PATH points it here).
func (o *Options) ToolkitConfig() string { return o.path("nvidia-container-runtime", "config.toml") }

// PodLogsDir is the kubelet's podLogsDir: <ns>_<pod>_<uid>/<container>/N.log.
func (o *Options) PodLogsDir() string { return o.path("pod-logs") }
