package app

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/deviceplugin/nodelock"
)

// A standby does none of the node's duties while the active plugin holds the node lock, and
// all of them once it lets go.
func TestNodeDutiesRunOnlyInTheLockHolder(t *testing.T) {
	lockFile := filepath.Join(t.TempDir(), "node-agent.lock")
	active, err := nodelock.TryAcquire(lockFile)
	if err != nil || active == nil {
		t.Fatal(active, err)
	}
	gauge, err := newDutiesGauge(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ran atomic.Int32
	d := func(ctx context.Context) { ran.Add(1); <-ctx.Done() }
	done := make(chan struct{})
	go func() {
		runNodeDuties(ctx, lockFile, gauge, ktesting.NewLogger(t, ktesting.NewConfig()), d, nil, d)
		close(done)
	}()
	time.Sleep(3 * nodelock.DefaultPoll)
	if n, g := ran.Load(), testutil.ToFloat64(gauge); n != 0 || g != 0 {
		t.Fatalf("while another plugin holds the lock: %d duties ran, gauge %v; want 0, 0", n, g)
	}
	if err := active.Release(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ran.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, g := ran.Load(), testutil.ToFloat64(gauge); n != 2 || g != 1 {
		t.Fatalf("after the holder let go: %d duties ran, gauge %v; want 2, 1", n, g)
	}
	if l, err := nodelock.TryAcquire(lockFile); err != nil || l != nil {
		t.Fatalf("the standby that took over does not hold the lock: TryAcquire = %v, %v", l, err)
	}
	cancel()
	<-done
	if l, err := nodelock.TryAcquire(lockFile); err != nil || l == nil {
		t.Fatalf("the lock is kept after the duties ended: TryAcquire = %v, %v", l, err)
	}
}

// Without a lock file the plugin is alone on its node and does its duties at once.
func TestNodeDutiesWithoutALockFileRunAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		runNodeDuties(ctx, "", nil, ktesting.NewLogger(t, ktesting.NewConfig()), func(ctx context.Context) { close(started); <-ctx.Done() })
		close(done)
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("duty did not start")
	}
	cancel()
	<-done
}
