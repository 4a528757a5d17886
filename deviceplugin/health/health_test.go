package health

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
)

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestXIDMakesCardUnhealthyAndRecheckBringsItBack(t *testing.T) {
	sn := simtest.New(t, "n", "spec:2x16GiB")
	gpus, sim, store := sn.GPUs, sn.Sim, sn.Store
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	m := New(gpus, store, clk, time.Minute, ktesting.NewLogger(t, ktesting.NewConfig()))
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	state := func(i int) api.CardState { return store.Inventory().Cards[i].State }

	sim.InjectXID(1, 13) // application XID: ignored
	sim.InjectXID(1, 79)
	poll(t, "card 1 unhealthy after XID 79", func() bool { return state(1) == api.CardUnhealthy })
	if state(0) != api.CardHealthy {
		t.Errorf("card 0 is %s, want healthy", state(0))
	}
	if r := store.Inventory().Cards[1].Reason; r != "XID 79" {
		t.Errorf("reason %q, want XID 79", r)
	}

	m.Recheck()
	if state(1) != api.CardUnhealthy {
		t.Fatal("card came back before the recheck interval passed without XIDs")
	}

	sim.SetLost(1, true)
	clk.Step(time.Minute)
	m.Recheck()
	if state(1) != api.CardUnhealthy {
		t.Fatal("card that fails the NVML re-check came back")
	}

	sim.SetLost(1, false)
	// The monitor's own ticker re-checks: step the clock until it fires.
	poll(t, "card 1 healthy again after a quiet interval and a passing re-check", func() bool {
		clk.Step(time.Minute)
		return state(1) == api.CardHealthy
	})
}
