// Package memlimit reads the memory limit of the cgroup a process runs in,
// for the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit).
//
// A program that trades memory for fewer garbage collections (a GOGC above
// 100) must still collect before its container's limit, not be killed at
// it: with a soft limit below the cgroup's, the runtime collects as often
// as it must near the limit, and as GOGC says below it.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// ReadFile reads a whole file (os.ReadFile; tests give their own).
type ReadFile func(name string) ([]byte, error)

// unlimitedV1 is the smallest cgroup v1 limit taken as none: v1 writes
// "no limit" as the largest page-aligned int64 (9223372036854771712).
const unlimitedV1 = 1 << 62

// CgroupLimit returns the memory limit, in bytes, of the cgroup the
// process is in, as /proc/self/cgroup names it under /sys/fs/cgroup: the
// v2 memory.max, else the v1 memory controller's memory.limit_in_bytes. It
// looks at the process's own cgroup first, then at the hierarchy's root (a
// container with its own cgroup namespace sees its cgroup there). It
// returns 0 and no error when no limit is set or no cgroup file is found
// (not Linux, no cgroup filesystem).
func CgroupLimit(read ReadFile) (int64, error) {
	self, err := read("/proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var candidates []string
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is "0::path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, under("/sys/fs/cgroup", parts[2], "memory.max")...)
		case hasController(parts[1], "memory"):
			candidates = append(candidates, under("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")...)
		}
	}
	for _, name := range candidates {
		b, err := read(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s: not a memory limit: %q", name, v)
		}
		if n >= unlimitedV1 {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// under returns root/cgroup/file and root/file; the first only when it is
// inside root (a cgroup outside the process's namespace reads "/../..").
func under(root, cgroup, file string) []string {
	own := path.Join(root, cgroup, file)
	if !strings.HasPrefix(own, root+"/") {
		return []string{path.Join(root, file)}
	}
	return []string{own, path.Join(root, file)}
}

func hasController(list, name string) bool { return slices.Contains(strings.Split(list, ","), name) }

// SoftLimit is the soft memory limit to set for a cgroup limit: fraction of
// it, or 0 (set none) when there is no limit or fraction is 0. The rest of
// the limit is for what the runtime does not count as its own (the
// executable, C libraries' memory, the page cache charged to the cgroup).
func SoftLimit(cgroupLimit int64, fraction float64) int64 {
	if cgroupLimit <= 0 || fraction <= 0 {
		return 0
	}
	return int64(float64(cgroupLimit) * fraction)
}
