package periodic

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRunCallsOnTicksAndKicksUntilTheContextEnds(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	kick := make(chan struct{})
	calls := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, clk, time.Minute, kick, func() { calls <- struct{}{} })
	}()
	called := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("no call after %s", what)
		}
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal("Run never started its ticker")
	}
	select {
	case <-calls:
		t.Fatal("Run called fn at the start")
	default:
	}
	clk.Step(time.Minute)
	called("a tick")
	kick <- struct{}{}
	called("a kick")
	cancel()
	<-done
}
