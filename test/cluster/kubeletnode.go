package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/test/kubeletnode"
)

// ToolkitVersion is the NVIDIA container toolkit the container lane builds
// (hack/container-lane.sh): the first version on the Go module proxy whose CDI
// mode honours plain /var/run/nvidia-container-devices/<id> volume mounts
// (v1.17.8 only reads .../cdi/<vendor>/<class>/<name> ones there).
const ToolkitVersion = "v1.20.1"

// ToolkitBinDir is where hack/container-lane.sh puts nvidia-container-runtime
// and nvidia-ctk: $GPUSHARE_TOOLKIT_BIN, else
// ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/nvidia-container-toolkit-v1.20.1/bin.
func ToolkitBinDir() string {
	if d := os.Getenv("GPUSHARE_TOOLKIT_BIN"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(filepath.Dir(BinDir())), "nvidia-container-toolkit-"+ToolkitVersion, "bin")
}

// LaneBinaries are the programs the container lane needs, by name: the
// kubelet (hack/build-k8s.sh kubelet), containerd, ctr and runc (Debian's
// packages), nvidia-container-runtime and nvidia-ctk (built from the toolkit's
// module). Missing ones are listed in missing.
func LaneBinaries() (found map[string]string, missing []string) {
	found = map[string]string{}
	candidates := map[string][]string{
		"kubelet":                  {filepath.Join(BinDir(), "kubelet")},
		"nvidia-container-runtime": {filepath.Join(ToolkitBinDir(), "nvidia-container-runtime")},
		"nvidia-ctk":               {filepath.Join(ToolkitBinDir(), "nvidia-ctk")},
	}
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/sbin") {
			candidates[name] = append(candidates[name], filepath.Join(dir, name))
		}
	}
	for name, paths := range candidates {
		for _, p := range paths {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				found[name] = p
				break
			}
		}
		if found[name] == "" {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return found, missing
}

// ContainerdVersion is the containerd 2 that hack/container-lane.sh builds
// with LANE_CONTAINERD2=1, for the DRA lane: Debian's containerd 1.6 ignores
// the CDI devices the kubelet names for DRA claims.
const ContainerdVersion = "v2.4.2"

// Containerd2BinDir is where hack/container-lane.sh puts containerd 2:
// $GPUSHARE_CONTAINERD2_BIN, else
// ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/containerd-v2.4.2/bin.
func Containerd2BinDir() string {
	if d := os.Getenv("GPUSHARE_CONTAINERD2_BIN"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(filepath.Dir(BinDir())), "containerd-"+ContainerdVersion, "bin")
}

// Containerd2Binaries are containerd 2's containerd, containerd-shim-runc-v2
// and ctr in Containerd2BinDir, by name, to replace Debian's in LaneBinaries'
// tools. Missing ones are listed in missing.
func Containerd2Binaries() (found map[string]string, missing []string) {
	found = map[string]string{}
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		p := filepath.Join(Containerd2BinDir(), name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			found[name] = p
		} else {
			missing = append(missing, name)
		}
	}
	return found, missing
}

// KubeletNodeOptions describe a real node (test/kubeletnode/cmd).
type KubeletNodeOptions struct {
	Name string
	// Binary is the built gpushare-kubeletnode program; Tools the binaries
	// LaneBinaries found.
	Binary string
	Tools  map[string]string
	// NvidiaRuntime: containerd runs containers through
	// nvidia-container-runtime in CDI mode (else plain runc).
	NvidiaRuntime bool
	// AcceptEnvvarUnprivileged starts the runtime with
	// accept-nvidia-visible-devices-envvar-when-unprivileged=true instead of
	// the documented false.
	AcceptEnvvarUnprivileged bool
	// GPUs is the simulated cards (the plugin's --nvml=spec: value).
	GPUs string
	// CDISpecDirs are more CDI spec directories for containerd (a DRA
	// driver's --dra-cdi-dir); they need containerd 2 in Tools.
	CDISpecDirs []string
	// Images (OCI archives) to import; PauseImage is the sandbox image.
	Images     []string
	PauseImage string
	Labels     string
	// PodCIDR gives pods a network (a CNI bridge; kubeletnode.Options).
	PodCIDR string
	// RegistryConfigDir is containerd's registry config_path (hosts.toml per
	// registry; kubeletnode.Options).
	RegistryConfigDir string
	// PluginBinary and PluginArgs: the device plugin (empty: none, e.g. when
	// the chart's DaemonSet runs it).
	PluginBinary string
	PluginArgs   []string
}

// KubeletNode is a running real node.
type KubeletNode struct {
	Opts       KubeletNodeOptions
	StateDir   string
	CgroupRoot string
	proc       *Process
}

// StartKubeletNode starts the node program (containerd, kubelet, plugin in a
// private mount namespace) on free ports, with a cgroup root named after
// this cluster's state directory and the node, so two suites on one machine
// never share one.
func (c *Cluster) StartKubeletNode(opts KubeletNodeOptions) (*KubeletNode, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	state := c.NodeStateDir(opts.Name)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	n := &KubeletNode{Opts: opts, StateDir: state,
		CgroupRoot: "/" + filepath.Base(c.opts.StateDir) + "-" + opts.Name}
	args := []string{
		"--node", opts.Name, "--kubeconfig", c.Kubeconfig, "--state-dir", state,
		"--kubelet", opts.Tools["kubelet"], "--containerd", opts.Tools["containerd"],
		"--ctr", opts.Tools["ctr"], "--runc", opts.Tools["runc"],
		"--pause-image", opts.PauseImage,
		"--kubelet-port", strconv.Itoa(ports[0]), "--healthz-port", strconv.Itoa(ports[1]),
		"--cgroup-root", n.CgroupRoot,
	}
	if opts.NvidiaRuntime {
		args = append(args, "--nvidia-runtime", opts.Tools["nvidia-container-runtime"], "--gpus", opts.GPUs)
		if opts.AcceptEnvvarUnprivileged {
			args = append(args, "--accept-envvar-unprivileged")
		}
	}
	for _, d := range opts.CDISpecDirs {
		args = append(args, "--cdi-spec-dir", d)
	}
	for _, img := range opts.Images {
		args = append(args, "--image", img)
	}
	if opts.Labels != "" {
		args = append(args, "--labels", opts.Labels)
	}
	if opts.PodCIDR != "" {
		args = append(args, "--pod-cidr", opts.PodCIDR)
	}
	if opts.RegistryConfigDir != "" {
		args = append(args, "--registry-config-dir", opts.RegistryConfigDir)
	}
	if opts.PluginBinary != "" {
		args = append(args, "--plugin", opts.PluginBinary, "--")
		args = append(args, opts.PluginArgs...)
	}
	n.proc, err = StartProcess("kubelet node "+opts.Name, n.LogFile(), opts.Binary, args...)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// LogFile is the node program's log; KubeletLog, PluginLog, ContainerdLog
// and ToolkitLog those of its parts.
func (n *KubeletNode) LogFile() string       { return filepath.Join(n.StateDir, "node.log") }
func (n *KubeletNode) KubeletLog() string    { return filepath.Join(n.StateDir, "kubelet.log") }
func (n *KubeletNode) PluginLog() string     { return filepath.Join(n.StateDir, "plugin.log") }
func (n *KubeletNode) ContainerdLog() string { return filepath.Join(n.StateDir, "containerd.log") }
func (n *KubeletNode) ToolkitLog() string {
	return filepath.Join(n.StateDir, "nvidia-container-runtime", "runtime.log")
}

// ToolkitConfig is the NVIDIA runtime's config.toml of this node.
func (n *KubeletNode) ToolkitConfig() string {
	return filepath.Join(n.StateDir, "nvidia-container-runtime", "config.toml")
}

// Logs names every log of the node, for failure messages.
func (n *KubeletNode) Logs() string {
	return fmt.Sprintf("node %s, kubelet %s, plugin %s, containerd %s, toolkit %s",
		n.LogFile(), n.KubeletLog(), n.PluginLog(), n.ContainerdLog(), n.ToolkitLog())
}

// Exited reports whether the node program has ended.
func (n *KubeletNode) Exited() (bool, error) { return n.proc.Exited() }

// KubeletPID and PluginPID read the PID files (0 if none).
func (n *KubeletNode) KubeletPID() int { return readPID(filepath.Join(n.StateDir, "kubelet.pid")) }
func (n *KubeletNode) PluginPID() int  { return readPID(filepath.Join(n.StateDir, "plugin.pid")) }

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// Registrations counts the device plugin registrations the kubelet logged.
func (n *KubeletNode) Registrations() int {
	b, _ := os.ReadFile(n.KubeletLog())
	return bytes.Count(b, []byte("Got registration request from device plugin"))
}

// Stop ends the node program (SIGTERM; it stops the plugin and kubelet, then
// kills the containers and shims and removes its cgroups) and checks that no
// cgroup of the node is left.
func (n *KubeletNode) Stop() error {
	err := n.proc.StopWithin(90 * time.Second)
	var left []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		d := filepath.Join("/sys/fs/cgroup", e.Name(), n.CgroupRoot)
		if _, serr := os.Stat(d); serr == nil {
			left = append(left, d)
		}
	}
	if len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("node %s left cgroups %v (log %s)", n.Opts.Name, left, n.LogFile()))
	}
	return err
}

// ProbeLine is one report of the probe image with the time the container
// runtime logged it.
type ProbeLine struct {
	Time   time.Time
	Report kubeletnode.ProbeReport
}

// ProbeReports reads the probe's reports from the kubelet's log files of the
// container (all its restarts), in order.
func (n *KubeletNode) ProbeReports(ns, pod string, uid types.UID, container string) ([]ProbeLine, error) {
	dir := filepath.Join(n.StateDir, "pod-logs", fmt.Sprintf("%s_%s_%s", ns, pod, uid), container)
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []ProbeLine
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			// CRI log format: "<RFC3339Nano> stdout F <line>".
			parts := strings.SplitN(sc.Text(), " ", 4)
			if len(parts) != 4 || !strings.HasPrefix(parts[3], kubeletnode.ProbePrefix) {
				continue
			}
			ts, err := time.Parse(time.RFC3339Nano, parts[0])
			if err != nil {
				continue
			}
			var r kubeletnode.ProbeReport
			if err := json.Unmarshal([]byte(strings.TrimPrefix(parts[3], kubeletnode.ProbePrefix)), &r); err != nil {
				continue // a line being written
			}
			out = append(out, ProbeLine{Time: ts, Report: r})
		}
	}
	return out, nil
}

// Signal sends sig to pid (a kubelet or plugin of this node).
func Signal(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("no process (pid %d)", pid)
	}
	return syscall.Kill(pid, sig)
}

// BuildStatic builds a static (CGO_ENABLED=0) program of the test module.
func BuildStatic(out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = filepath.Join(RepoRoot(), "test")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
