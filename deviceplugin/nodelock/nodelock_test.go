package nodelock

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const envHolder = "GPUSHARE_NODELOCK_TEST_HOLDER"

// TestMain lets the test binary act as another plugin of the node: with
// envHolder set to a path it takes the lock, says so and sleeps.
func TestMain(m *testing.M) {
	if path := os.Getenv(envHolder); path != "" {
		l, err := TryAcquire(path)
		if err != nil || l == nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}

func TestOneHolderAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "node-agent.lock")
	first, err := TryAcquire(path)
	if err != nil || first == nil {
		t.Fatalf("first TryAcquire = %v, %v; want the lock", first, err)
	}
	second, err := TryAcquire(path)
	if err != nil || second != nil {
		t.Fatalf("second TryAcquire while held = %v, %v; want nil, nil", second, err)
	}
	got := make(chan *Lock, 1)
	waited := make(chan struct{})
	go func() {
		l, err := Acquire(context.Background(), path, 10*time.Millisecond, func() { close(waited) })
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-waited
	select {
	case <-got:
		t.Fatal("Acquire returned while the first holder still held the lock")
	case <-time.After(100 * time.Millisecond):
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("Acquire returned no lock")
		}
		_ = l.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not take the lock the first holder released")
	}
}

func TestAcquireEndsWithItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node-agent.lock")
	held, err := TryAcquire(path)
	if err != nil || held == nil {
		t.Fatal(held, err)
	}
	defer held.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if l, err := Acquire(ctx, path, 10*time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Fatalf("Acquire = %v, %v; want the context's deadline", l, err)
	}
}

// A plugin killed with SIGKILL gives the lock up at once: its standby
// takes the node's duties over without waiting for any timeout.
func TestAKilledHolderFreesTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node-agent.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHolder+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	if l, err := TryAcquire(path); err != nil || l != nil {
		t.Fatalf("TryAcquire while another process holds it = %v, %v; want nil, nil", l, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err := Acquire(ctx, path, 10*time.Millisecond, nil)
	if err != nil || l == nil {
		t.Fatalf("Acquire after the holder's SIGKILL = %v, %v", l, err)
	}
	defer l.Release()
	t.Logf("taken over %v after the holder's exit", time.Since(start))
}

func TestBadPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TryAcquire(filepath.Join(file, "node-agent.lock")); err == nil {
		t.Fatal("TryAcquire under a regular file: want an error")
	}
}
