package kubeletnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/test/nodeagent"
)

// Run prepares the node in this process's private mount namespace (made by
// nodeagent.ReexecInMountNamespace), starts containerd, imports the images,
// then keeps the kubelet and the device plugin running until ctx ends, and
// tears everything down. Killing the kubelet or the plugin (PID files
// kubelet.pid, plugin.pid) restarts it after 1 s: a kubelet or plugin restart.
func (o *Options) Run(ctx context.Context) (err error) {
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return err
	}
	// /var/lib/kubelet (tmpfs, with device-plugins and pod-resources from the
	// state directory), refusing outside a private namespace.
	if err := nodeagent.SetupKubeletDir(o.StateDir); err != nil {
		return err
	}
	// containerd's shims and runc keep sockets and state below
	// /run/containerd (hard-coded in containerd 1.6), the kubelet links logs
	// in /var/log/containers: private tmpfs for both.
	for _, dir := range []string{"/run/containerd", "/var/log"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
		}
	}
	if err := o.writeFiles(); err != nil {
		return err
	}
	sysctls := saveSysctls()
	cg := cgroupRoot(o.CgroupRoot)
	if err := cg.create(); err != nil {
		return err
	}
	var stopContainerd func()
	defer func() {
		start := time.Now()
		logger.Info("Tearing the node down")
		if terr := o.teardown(logger, cg, stopContainerd); terr != nil {
			logger.Error(terr, "Teardown")
			err = errors.Join(err, terr)
		}
		restoreSysctls(logger, sysctls)
		logger.Info("Node torn down", "took", time.Since(start))
	}()

	containerd, err := o.startContainerd(ctx)
	if err != nil {
		return err
	}
	containerdDone := make(chan error, 1)
	go func() { containerdDone <- containerd.Wait() }()
	stopContainerd = func() {
		_ = containerd.Process.Signal(syscall.SIGTERM)
		select {
		case <-containerdDone:
		case <-time.After(10 * time.Second):
			_ = containerd.Process.Kill()
			<-containerdDone
		}
	}
	if err := o.waitContainerd(ctx, containerdDone); err != nil {
		return err
	}
	for _, img := range o.Images {
		if out, err := o.ctr(ctx, "images", "import", "--snapshotter", "native", img); err != nil {
			return fmt.Errorf("import %s: %w\n%s", img, err, out)
		}
		logger.Info("Imported image", "archive", img)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	kubelet := &nodeagent.PluginCommand{
		Path: o.Kubelet, Args: o.kubeletArgs(),
		LogFile: o.path("kubelet.log"), PIDFile: o.path("kubelet.pid"),
	}
	go func() { errs <- kubelet.Supervise(runCtx, o.NodeName) }()
	n := 1
	if o.Plugin != "" {
		n++
		plugin := &nodeagent.PluginCommand{
			Path: o.Plugin, Args: o.PluginArgs,
			Env:     []string{"KUBECONFIG=" + o.Kubeconfig},
			LogFile: o.path("plugin.log"), PIDFile: o.path("plugin.pid"),
		}
		go func() { errs <- plugin.Supervise(runCtx, o.NodeName) }()
	}
	logger.Info("Node running", "node", o.NodeName, "state", o.StateDir)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-containerdDone:
		runErr = fmt.Errorf("containerd exited: %v (log %s)", err, o.path("containerd.log"))
		containerdDone <- err
	case err := <-errs:
		runErr = err
		n--
	}
	cancel()
	for ; n > 0; n-- {
		if err := <-errs; err != nil && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

func (o *Options) startContainerd(ctx context.Context) (*exec.Cmd, error) {
	logf, err := os.OpenFile(o.path("containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(o.Containerd, "--config", o.path("containerd.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// The shims inherit this environment: NVIDIA's runtime reads its
	// config.toml from NVIDIA_CTK_CONFIG_FILE_PATH (v1.19+) or
	// $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml (older ones too),
	// and finds runc in PATH. containerd finds its shim in PATH before its own
	// directory: containerd's directory comes first, so a containerd 2 built
	// into the cache never starts Debian's 1.6 shim.
	cmd.Env = envWith("NVIDIA_CTK_CONFIG_FILE_PATH="+o.ToolkitConfig(), "XDG_CONFIG_HOME="+o.StateDir,
		"PATH="+filepath.Dir(o.Containerd)+":"+filepath.Dir(o.Runc)+":"+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	klog.FromContext(ctx).Info("Started containerd", "pid", cmd.Process.Pid, "socket", o.ContainerdSocket())
	return cmd, nil
}

func (o *Options) waitContainerd(ctx context.Context, done chan error) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("containerd exited: %v (log %s)", err, o.path("containerd.log"))
		default:
		}
		out, err := o.ctr(ctx, "version")
		last = string(out)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd not ready: %w (%s; log %s)", err, strings.TrimSpace(last), o.path("containerd.log"))
	}
	return nil
}

// ctr runs ctr against this node's containerd, namespace k8s.io.
func (o *Options) ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Ctr, append([]string{"--address", o.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	return cmd.CombinedOutput()
}

// teardown removes what the kubelet left running (the kubelet and the
// plugin are stopped by then): it kills every process in the node's cgroups
// (the containers), stops containerd, kills every other process in this mount
// namespace (containerd's shims) and removes the cgroups. Mounts need no
// work: they live in this namespace, which ends with this process.
func (o *Options) teardown(logger klog.Logger, cg cgroupRoot, stopContainerd func()) error {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var errs []error
	if left := cg.pids(); len(left) > 0 {
		logger.Info("Killing the processes left in the node's cgroups", "pids", left)
	}
	if err := cg.killAll(ctx); err != nil {
		errs = append(errs, err)
	}
	if stopContainerd != nil {
		stopContainerd()
	}
	if err := killNamespacePeers(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := cg.remove(ctx); err != nil {
		errs = append(errs, err)
	}
	if o.PodCIDR != "" {
		// The pods' network namespaces ended with their processes (their veths
		// with them); the bridge and host-local's address leases are the host's.
		if out, err := exec.CommandContext(ctx, "ip", "link", "del", BridgeName).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "Cannot find device") {
			errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", BridgeName, err, out))
		}
		errs = append(errs, os.RemoveAll("/var/lib/cni/networks/gpushare-e2e"))
	}
	return errors.Join(errs...)
}
