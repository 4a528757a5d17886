package cache

import (
	"time"

	"k8s.io/utils/clock"
)

// WithClock sets the clock used for assumed-pod expiry (tests use a fake).
func WithClock(c clock.Clock) Option { return func(ca *Cache) { ca.clock = c } }

// WithAssumeTTL sets how long a bound but unconfirmed assumption lives.
func WithAssumeTTL(d time.Duration) Option { return func(ca *Cache) { ca.assumeTTL = d } }
