package nvml

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
)

// A lost GPU answers every NVML call at once with ERROR_GPU_IS_LOST.
// WatchHealth reports the loss once and waits again after a backoff that
// doubles while the loss lasts (1 s, 2 s, 4 s, … up to the maximum), on its
// clock, instead of spinning; an answer that is not a loss resets it, and a
// new loss is reported again.
func TestWatchHealthBacksOffWhileTheGPUIsLost(t *testing.T) {
	src, _ := ParseSource("spec:2x40GiB")
	sim := NewSimulator("n", src.GPUs...)
	var waits atomic.Int32
	// Waits 1-3 lose the GPU, 4 answers (timeout), 5 loses it again, then
	// ordinary timeouts.
	sim.srv.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &mock.EventSet{
			FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
			WaitFunc: func(uint32) (gonvml.EventData, gonvml.Return) {
				switch n := waits.Add(1); {
				case n <= 3 || n == 5:
					return gonvml.EventData{}, gonvml.ERROR_GPU_IS_LOST
				case n == 4:
					return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
				}
				time.Sleep(time.Millisecond) // an ordinary wait that times out
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			},
		}, gonvml.SUCCESS
	}
	clk := testingclock.NewFakeClock(time.Now())
	n, err := Open(sim.Library(), Options{Clock: clk, LostBackoff: time.Second, MaxLostBackoff: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ev events
	done := make(chan error, 1)
	go func() { done <- n.WatchHealth(ctx, ev.add) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealth: %v", err)
		}
	}()

	// blocked waits until WatchHealth has made want Waits and sleeps on the
	// clock.
	blocked := func(want int32) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return waits.Load() == want && clk.HasWaiters(), nil
		})
		if err != nil {
			t.Fatalf("want %d NVML waits and a backoff on the clock; got %d waits (waiters %v)", want, waits.Load(), clk.HasWaiters())
		}
	}
	steps := []struct {
		step  time.Duration
		waits int32
	}{
		{0, 1},                       // lost: report, back off 1 s
		{999 * time.Millisecond, 1},  // not yet
		{time.Millisecond, 2},        // lost again: 2 s
		{time.Second, 2},             // not yet
		{time.Second, 3},             // lost again: 4 s, capped at 3 s
		{2999 * time.Millisecond, 3}, // not yet
		{time.Millisecond, 5},        // an answer resets; the next loss backs off 1 s
	}
	for i, s := range steps {
		clk.Step(s.step)
		blocked(s.waits)
		if i == 0 && len(ev.list()) != 1 {
			t.Fatalf("reports after the first loss: %v, want one", ev.list())
		}
	}
	got := ev.list()
	if len(got) != 2 || got[0] != (HealthEvent{Reason: "NVML: GPU is lost"}) || got[1] != got[0] {
		t.Errorf("reports = %v, want the loss reported once per loss (twice)", got)
	}
}
