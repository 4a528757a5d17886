// Package nodelock elects the one process of a node that does the node's
// duties when several device plugins of the node run at once (a standby
// beside the active plugin, or the old and new pods of a rolling update):
// the holder of an exclusive flock(2) on a file every plugin of the node
// opens (a hostPath the DaemonSet mounts in each of its containers).
//
// The kernel drops the lock the moment its holder exits, however it exits
// (SIGKILL and OOM kill included), so a waiting process takes over within
// one poll without a lease, a heartbeat or a request to the API server.
package nodelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPoll is how often a waiting process tries the lock.
const DefaultPoll = 250 * time.Millisecond

// Lock is a held node lock.
type Lock struct{ f *os.File }

// Release gives the lock up (exiting gives it up too).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// TryAcquire takes the lock on path if no other holder has it: (nil, nil)
// when another process (or another open of the file) holds it. The file and
// its directory are created if missing.
func TryAcquire(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("node lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("node lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Acquire waits until it holds the lock on path, trying every poll
// (DefaultPoll when 0), or until ctx ends (ctx's error). waiting, when set,
// is called once if the lock is held by another process at the first try.
func Acquire(ctx context.Context, path string, poll time.Duration, waiting func()) (*Lock, error) {
	if poll <= 0 {
		poll = DefaultPoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for first := true; ; first = false {
		l, err := TryAcquire(path)
		if err != nil || l != nil {
			return l, err
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
