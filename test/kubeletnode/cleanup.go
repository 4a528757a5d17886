package kubeletnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

const cgroupMount = "/sys/fs/cgroup"

// cgroupRoot is the kubelet's cgroup root (e.g. /gpushare-e2e-1234) in every
// cgroup v1 hierarchy mounted below /sys/fs/cgroup.
type cgroupRoot string

// Filesystem magic numbers of cgroup mounts.
const (
	cgroupV1Magic = 0x27e0eb
	cgroupV2Magic = 0x63677270
)

// hierarchies are the mounted cgroup v1 hierarchies (cpu, memory, ...) and,
// with v2, the cgroup2 mount of a hybrid host (/sys/fs/cgroup/unified),
// where runc and the kubelet make the root too.
func hierarchies(v2 bool) ([]string, error) {
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(cgroupMount, e.Name())
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			continue
		}
		if st.Type == cgroupV1Magic || (v2 && st.Type == cgroupV2Magic) {
			out = append(out, dir)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy below %s", cgroupMount)
	}
	return out, nil
}

// create makes the root in every hierarchy (the kubelet checks it exists);
// cpuset needs its cpus and mems before anything can join.
func (r cgroupRoot) create() error {
	hs, err := hierarchies(false)
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, string(r))
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// dirs lists the root's cgroup directories in every hierarchy (v2 included),
// deepest first.
func (r cgroupRoot) dirs() []string {
	hs, _ := hierarchies(true)
	var out []string
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, string(r)), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// pids lists the processes in the root's cgroups.
func (r cgroupRoot) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range r.dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// killAll SIGKILLs the processes in the root's cgroups until none is left.
func (r cgroupRoot) killAll(ctx context.Context) error {
	var left []int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		left = r.pids()
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes left in cgroup %s: %v", r, left)
	}
	return nil
}

// remove deletes the root's cgroups, deepest first, retrying while the
// kernel still counts exiting tasks.
func (r cgroupRoot) remove(ctx context.Context) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		for _, d := range r.dirs() {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				left = append(left, d)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("cgroups left: %v", left)
	}
	return nil
}

// killNamespacePeers SIGKILLs every other process in this mount namespace
// (containerd and its shims: the namespace is this node's alone) and waits
// until they are gone.
func killNamespacePeers(ctx context.Context) error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	me := os.Getpid()
	var left []int
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == me {
				continue
			}
			ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt"))
			if err != nil || ns != self {
				continue
			}
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
				// "pid (comm) S ...": a zombie is our child waiting to be reaped.
				if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
					continue
				}
			}
			left = append(left, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes left in the node's mount namespace: %v", left)
	}
	return nil
}

// The kernel settings the kubelet changes at start (setupKernelTunables:
// it writes vm.overcommit_memory=1, kernel.panic=10, ...). They are
// machine-wide; the node puts back what it found.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func saveSysctls() map[string][]byte {
	saved := map[string][]byte{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			saved[k] = b
		}
	}
	return saved
}

func restoreSysctls(logger klog.Logger, saved map[string][]byte) {
	for k, v := range saved {
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && string(cur) == string(v) {
			continue
		}
		if err := os.WriteFile(p, v, 0o644); err != nil {
			logger.Error(err, "Restoring kernel setting", "key", k)
		}
	}
}
