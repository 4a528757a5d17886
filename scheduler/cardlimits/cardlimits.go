// Package cardlimits keeps the card-limits ConfigMap (api.CardLimitsConfigMap)
// in step with the nodes' inventories, so that the chart's admission policy
// can refuse, at pod creation, a request larger than any card in the cluster.
package cardlimits

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/configmapdata"
)

// Publisher writes api.Names.CardLimitsFromNodes over the nodes it lists into one
// ConfigMap. It only updates a ConfigMap that exists (the chart creates it, so
// the extender needs no right to create ConfigMaps), and only when the data
// changes; several extender replicas publishing at once agree.
type Publisher struct {
	Nodes     corelisters.NodeLister
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Names are the keys the inventories are read from (zero:
	// api.DefaultNames).
	Names api.Names
}

// Sync publishes the current limits once. It reports whether it changed the
// ConfigMap.
func (p *Publisher) Sync(ctx context.Context) (bool, error) {
	nodes, err := p.Nodes.List(labels.Everything())
	if err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	want := p.Names.OrDefault().CardLimitsFromNodes(nodes).Data()
	return configmapdata.Sync(ctx, p.Client, p.Namespace, p.Name, "--card-limits-configmap", want)
}

// Run publishes after each signal on changed (node adds, updates, deletes) and
// every resync, until ctx ends. Errors are logged and retried at the next
// signal or resync.
func (p *Publisher) Run(ctx context.Context, changed <-chan struct{}, resync time.Duration) {
	logger := klog.FromContext(ctx).WithValues("configMap", klog.KRef(p.Namespace, p.Name))
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		wrote, err := p.Sync(ctx)
		switch {
		case err != nil:
			logger.Error(err, "Publishing the largest card for admission failed; will retry")
		case wrote:
			logger.Info("Published the largest card for admission")
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}
