package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// ErrGone is returned (wrapped) by OwnerOf for a process that has exited.
var ErrGone = errors.New("process has exited")

// OwnerOf reads /proc/<pid>/cgroup from proc, a file system rooted at the
// host's /proc (os.DirFS("/proc") with hostPID; a fake tree in tests).
func OwnerOf(proc fs.FS, pid uint32) (Owner, error) {
	b, err := fs.ReadFile(proc, strconv.FormatUint(uint64(pid), 10)+"/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return Owner{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if err != nil {
		return Owner{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ParseCgroup(b), nil
}
