package inspect

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchPrintsAgainOnEachTick: --watch prints a view, then another one
// at each tick of its clock (with what changed in between), and returns
// without error when interrupted.
func TestWatchPrintsAgainOnEachTick(t *testing.T) {
	var out syncBuffer
	o := NewOptions(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	client := fake.NewClientset(scenarios["mixed-sizes"](t)...)
	o.Client = client
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	o.Clock = clk
	cmd := NewCmd(o)
	cmd.SetArgs([]string{"--watch", "--interval", "10s", "gpu-a"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	frames := func() int { return strings.Count(out.String(), "Every 10s, at ") }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("waiting for %s: %v; output so far:\n%s", what, err, out.String())
		}
	}
	waitFor("the first view", func() bool { return frames() == 1 && strings.Contains(out.String(), "MAX FREE") })
	if !strings.Contains(out.String(), "Every 10s, at 03:04:05") {
		t.Errorf("first frame does not say when it was taken:\n%s", out.String())
	}
	// The notebook pod goes away; the next tick shows the card free.
	if err := client.CoreV1().Pods("default").Delete(context.Background(), "notebook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the ticker", clk.HasWaiters)
	clk.Step(10 * time.Second)
	waitFor("the second view", func() bool { return frames() == 2 && strings.Count(out.String(), "MAX FREE") == 4 })
	if !strings.Contains(out.String(), "gpu-a  0/15") {
		t.Errorf("second frame does not show the freed card:\n%s", out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("interrupted watch returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop when its context ended")
	}
}
