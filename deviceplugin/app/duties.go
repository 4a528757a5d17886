package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nodelock"
)

// duty is work one process per node does, whatever number of plugins serve the node's kubelet:
// publishing the GPU inventory on the Node and the memory sampler with its enforcer. It runs
// until ctx ends.
type duty func(ctx context.Context)

// newDutiesGauge registers gpushare_device_plugin_node_duties: 1 in the process that does the
// node's duties, 0 in a standby waiting for them.
func newDutiesGauge(reg prometheus.Registerer) (prometheus.Gauge, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpushare_device_plugin_node_duties",
		Help: "1 while this plugin process does its node's duties (inventory on the Node, memory sampling and enforcement); 0 while another plugin of the node holds --node-lock-file and this one only serves the kubelet.",
	})
	if err := reg.Register(g); err != nil {
		return nil, err
	}
	return g, nil
}

// runNodeDuties runs the duties (nil ones skipped) once this process holds the node lock
// (lockFile; empty: at once, the process is alone on its node) until ctx ends. Meanwhile the
// process serves the kubelet like any other plugin of the node: a standby keeps the node's
// devices healthy in the kubelet while the active plugin restarts, and takes the duties over the
// moment that plugin exits (the kernel drops its lock).
func runNodeDuties(ctx context.Context, lockFile string, gauge prometheus.Gauge, log klog.Logger, duties ...duty) {
	if lockFile != "" {
		lock, err := nodelock.Acquire(ctx, lockFile, nodelock.DefaultPoll, func() {
			log.Info("Standing by: another plugin of this node holds the node lock and does the node's duties (inventory, memory sampling and enforcement); this one serves the kubelet and takes over when that one exits", "lock", lockFile)
		})
		if err != nil {
			if ctx.Err() == nil {
				log.Error(err, "No node duties in this process: the node lock cannot be taken", "lock", lockFile)
			}
			return
		}
		defer lock.Release()
		log.Info("Holding the node lock: this plugin does the node's duties", "lock", lockFile)
	}
	if gauge != nil {
		gauge.Set(1)
	}
	var wg sync.WaitGroup
	for _, d := range duties {
		if d == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d(ctx)
		}()
	}
	wg.Wait()
}

// Publish writes the store's inventory on the Node now and after every
// change, retrying failures with a growing delay (up to 30s).
func Publish(ctx context.Context, cl *cluster.Cluster, store *inventory.Store, recordKey string, log klog.Logger) {
	delay := time.Second
	for {
		changed := store.InventoryChanged()
		inv := store.Inventory()
		if err := cl.Publish(ctx, inv, recordKey); err != nil {
			log.Error(err, "Publishing the GPU inventory failed; retrying", "in", delay)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(2*delay, 30*time.Second)
			continue
		}
		delay = time.Second
		log.V(1).Info("GPU inventory published", "node", cl.Node(), "cards", len(inv.Cards))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
