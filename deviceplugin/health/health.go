// Package health keeps the card state's health half current: it turns NVML
// critical-XID events into unhealthy cards and brings a card back once it has
// been quiet for a recheck interval and answers NVML again.
package health

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/periodic"
)

// Monitor watches NVML events for the store's cards.
type Monitor struct {
	nvml    nvml.Interface
	store   *inventory.Store
	clock   clock.WithTicker
	recheck time.Duration
	log     klog.Logger

	mu   sync.Mutex
	last map[string]time.Time // UUID → time of the last critical event
}

// New builds a Monitor. recheck is how long a card must be free of critical
// events before a re-check may bring it back (0: never brought back).
func New(n nvml.Interface, store *inventory.Store, clk clock.WithTicker, recheck time.Duration, log klog.Logger) *Monitor {
	return &Monitor{nvml: n, store: store, clock: clk, recheck: recheck, log: log, last: map[string]time.Time{}}
}

// Run watches until ctx is done. If NVML cannot watch events at all, health
// checking stops (logged) and the cards keep their state.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := m.nvml.WatchHealth(ctx, m.report)
		if err != nil {
			m.log.Error(err, "GPU health checks stopped: NVML cannot watch XID events")
		}
	}()
	if m.recheck > 0 {
		periodic.Run(ctx, m.clock, m.recheck, nil, m.Recheck)
	}
	wg.Wait()
}

func (m *Monitor) report(e nvml.HealthEvent) {
	m.mu.Lock()
	now := m.clock.Now()
	if e.UUID == "" {
		for _, c := range m.store.Cards() {
			m.last[c.UUID] = now
		}
	} else {
		m.last[e.UUID] = now
	}
	m.mu.Unlock()
	if m.store.SetUnhealthy(e.UUID, e.Reason) {
		m.log.Info("GPU unhealthy", "card", e.UUID, "reason", e.Reason)
	}
}

// Recheck brings back every unhealthy card that has had no critical event for
// the recheck interval and that NVML answers for.
func (m *Monitor) Recheck() {
	now := m.clock.Now()
	for uuid := range m.store.Unhealthy() {
		m.mu.Lock()
		quiet := now.Sub(m.last[uuid]) >= m.recheck
		m.mu.Unlock()
		if !quiet {
			continue
		}
		if err := m.nvml.Check(uuid); err != nil {
			m.log.V(2).Info("GPU still unhealthy", "card", uuid, "err", err)
			continue
		}
		if m.store.SetHealthy(uuid) {
			m.log.Info("GPU healthy again", "card", uuid)
		}
	}
}
