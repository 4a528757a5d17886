// Package periodic owns the loop every long-running part of gpushare uses
// for its resyncs, reloads and rechecks: call a function on a clock's ticks,
// and on demand, until a context ends.
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Run calls fn after every interval on clk, and whenever kick receives (a nil
// kick never does), until ctx is done. It does not call fn at the start, and
// never again once ctx is done.
func Run(ctx context.Context, clk clock.WithTicker, interval time.Duration, kick <-chan struct{}, fn func()) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-kick:
		}
		fn()
	}
}
