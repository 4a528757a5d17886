package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
)

// KubeletDir is the kubelet's root directory; the device manager and device
// plugins hard-code paths below it.
const KubeletDir = "/var/lib/kubelet"

// envParentNamespace, set for the re-executed agent, names the mount
// namespace of the parent it must not be in.
const envParentNamespace = "GPUSHARE_NODEAGENT_PARENT_MOUNTNS"

// ReexecInMountNamespace runs this program again in a new, private mount
// namespace (Go makes / recursively private in the child) and returns its
// exit code; the caller should exit with it. Signals SIGINT and SIGTERM are
// passed on to the child. In the child itself it returns inChild true and
// does nothing. Needs root (CAP_SYS_ADMIN).
func ReexecInMountNamespace() (inChild bool, exitCode int, err error) {
	if os.Getenv(envParentNamespace) != "" {
		return true, 0, nil
	}
	parentNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false, 1, fmt.Errorf("read own mount namespace: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return false, 1, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), envParentNamespace+"="+parentNS)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Pdeathsig: if this parent dies, so does the agent (the parent is the
	// PID people and tests stop). It fires when the starting OS thread exits,
	// so keep this goroutine on its thread for the rest of the process.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGTERM}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return false, 1, fmt.Errorf("start agent in a new mount namespace (needs root): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				return false, exitErr.ExitCode(), nil
			}
			if err != nil {
				return false, 1, err
			}
			return false, 0, nil
		}
	}
}

// SetupKubeletDir prepares this process's private mount namespace: a tmpfs
// on /var/lib/kubelet (created on the host if missing, empty there), with
// stateDir/device-plugins, stateDir/pod-resources and
// stateDir/plugins_registry bind-mounted at the kubelet's paths, all of it a
// shared mount as the kubelet requires. The device manager's sockets and
// checkpoint, and the DRA plugins' registration sockets, thus live in
// stateDir, where a device or DRA plugin of this node outside the namespace,
// or the next agent after a restart, finds them.
//
// It refuses to run anywhere but in the new namespace ReexecInMountNamespace
// made: never in the namespace of the process that started the agent.
func SetupKubeletDir(stateDir string) error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	if parent := os.Getenv(envParentNamespace); parent == "" || parent == self {
		return fmt.Errorf("refusing to mount over %s outside a private mount namespace (own %s, parent %q): start the agent through ReexecInMountNamespace", KubeletDir, self, parent)
	}
	if err := os.MkdirAll(KubeletDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", KubeletDir, err)
	}
	if err := syscall.Mount("tmpfs", KubeletDir, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", KubeletDir, err)
	}
	for _, sub := range []string{"device-plugins", "pod-resources", "plugins_registry"} {
		src := filepath.Join(stateDir, sub)
		dst := filepath.Join(KubeletDir, sub)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", src, err)
		}
		if sub == "plugins_registry" { // the kubelet would dial what a stopped DRA plugin left
			stale, _ := filepath.Glob(filepath.Join(src, "*.sock"))
			for _, f := range stale {
				_ = os.Remove(f)
			}
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dst, err)
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, dst, err)
		}
	}
	// A real kubelet wants its root directory on a shared mount. Finding it
	// private, it bind-mounts the directory onto itself (not recursively)
	// and makes that shared: the new mount hides the two binds above, and
	// every socket created afterwards lands in the tmpfs, not in stateDir.
	// The PodResources socket races that bind (created before or after it),
	// so a pod's hostPath to it found it on one run and an empty directory
	// on another. Shared already, the kubelet leaves the mounts alone.
	if err := syscall.Mount("", KubeletDir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", KubeletDir, err)
	}
	return nil
}
