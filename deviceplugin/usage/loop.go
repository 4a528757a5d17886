package usage

import (
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Loop samples every Interval: the sample goes to the metrics, the
// Enforcer and (at most once per PublishEvery) the inventory.
type Loop struct {
	Sampler  *Sampler
	Enforcer *Enforcer
	Metrics  *Metrics // nil: none
	Interval time.Duration
	// Publish receives the memory in use per card UUID in MiB (rounded up),
	// for the node inventory; at most once per PublishEvery, cards NVML could
	// not list left out.
	Publish      func(usedMiB map[string]int64)
	PublishEvery time.Duration
	Clock        clock.WithTicker
	Log          klog.Logger

	lastPublish time.Time
	prFailing   bool
}

// Run sweeps until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	t := l.Clock.NewTicker(l.Interval)
	defer t.Stop()
	for {
		l.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Once takes one sample and hands it on.
func (l *Loop) Once(ctx context.Context) {
	start := l.Clock.Now()
	s, err := l.Sampler.Sweep(ctx)
	if err != nil {
		l.Log.Error(err, "GPU memory sweep failed; trying again at the next interval", "interval", l.Interval)
		return
	}
	if l.Metrics != nil {
		l.Metrics.ObserveSweep(l.Clock.Since(start).Seconds())
		l.Metrics.Set(s)
	}
	switch {
	case s.PodResourcesErr != nil && !l.prFailing:
		l.Log.Error(s.PodResourcesErr, "Grants are read from the pods' assignment records until the kubelet's PodResources answer again")
	case s.PodResourcesErr == nil && l.prFailing:
		l.Log.Info("The kubelet's PodResources answer again")
	}
	l.prFailing = s.PodResourcesErr != nil
	for _, c := range s.Cards {
		if c.Err != nil {
			l.Log.V(1).Info("Card processes unavailable this sweep", "card", c.UUID, "err", c.Err)
		}
	}
	if l.Enforcer != nil {
		l.Enforcer.Observe(ctx, s)
	}
	if l.Publish != nil && (l.lastPublish.IsZero() || s.Time.Sub(l.lastPublish) >= l.PublishEvery) {
		used := map[string]int64{}
		for _, c := range s.Cards {
			if c.Err == nil {
				used[c.UUID] = (c.UsedBytes + 1<<20 - 1) >> 20
			}
		}
		l.Publish(used)
		l.lastPublish = s.Time
	}
}
