package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// podCgroup is a cgroup shaped the way the kubelet shapes a container's
// (cgroup v2 with the systemd driver, or cgroup v1 with cgroupfs), so that
// the sampler's /proc/PID/cgroup mapping is exercised on a real kernel.
type podCgroup struct {
	dirs []string // created, innermost last
	root string   // where to move processes back to
}

// makePodCgroup creates the container cgroup for pod UID uid and container
// ID id under the host's cgroup mount and moves pid into it.
func makePodCgroup(mount, uid, id string, pid int) (*podCgroup, error) {
	var root string
	var rel []string
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		root = mount // cgroup v2, systemd driver's names
		u := strings.ReplaceAll(uid, "-", "_")
		rel = []string{"kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod" + u + ".slice", "cri-containerd-" + id + ".scope"}
	} else {
		for _, h := range []string{"pids", "cpu,cpuacct", "memory", "systemd"} { // cgroup v1: any one hierarchy
			if _, err := os.Stat(filepath.Join(mount, h, "cgroup.procs")); err == nil {
				root = filepath.Join(mount, h)
				break
			}
		}
		if root == "" {
			return nil, fmt.Errorf("no cgroup v2 mount nor v1 hierarchy found under %s", mount)
		}
		rel = []string{"kubepods", "besteffort", "pod" + uid, id}
	}
	cg := &podCgroup{root: root}
	dir := root
	for _, r := range rel {
		dir = filepath.Join(dir, r)
		err := os.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			cg.dirs = append(cg.dirs, dir) // ours to remove
		case !errors.Is(err, os.ErrExist):
			cg.remove()
			return nil, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		cg.remove()
		return nil, fmt.Errorf("moving pid %d into %s: %w", pid, dir, err)
	}
	return cg, nil
}

// release moves pid (if still alive) back to the root and removes the
// cgroups it created.
func (cg *podCgroup) release(pid int) {
	_ = os.WriteFile(filepath.Join(cg.root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	cg.remove()
}

func (cg *podCgroup) remove() {
	for i := len(cg.dirs) - 1; i >= 0; i-- {
		_ = os.Remove(cg.dirs[i])
	}
}
