package usage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrGone is returned (wrapped) by OwnerOf for a process that has exited.
var ErrGone = errors.New("process has exited")

// OwnerOf reads /proc/<pid>/cgroup under proc, the host's /proc ("/proc"
// with hostPID; a fake tree in tests).
func OwnerOf(proc string, pid uint32) (Owner, error) {
	var buf [4096]byte
	return ownerOf(proc, pid, buf[:])
}

// ownerOf is OwnerOf with the caller's buffer. It costs three system calls
// (open, read, close; os.ReadFile takes five): the sweep reads one file per
// process on the node's cards.
func ownerOf(proc string, pid uint32, buf []byte) (Owner, error) {
	path := filepath.Join(proc, strconv.FormatUint(uint64(pid), 10), "cgroup")
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) {
		return Owner{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if err != nil {
		return Owner{}, fmt.Errorf("pid %d: open %s: %w", pid, path, err)
	}
	defer func() { _ = syscall.Close(fd) }()
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...) // a long v1 file: grow
		}
		m, err := syscall.Read(fd, buf[n:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ESRCH) {
			return Owner{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		if err != nil {
			return Owner{}, fmt.Errorf("pid %d: read %s: %w", pid, path, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return ParseCgroup(buf[:n]), nil
}
