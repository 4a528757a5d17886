package recordkey

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/configmapdata"
)

// Publisher writes the public halves of the extender's keys in force
// (RecordKeyCurrent, RecordKeyPrevious; api.NodeKeyAnnotation's base64)
// into one ConfigMap, which the device plugins mount as their record key
// directory: the plugins never hold a private key of the extender. It only
// updates a ConfigMap that exists (the chart creates it empty), and only
// when the data changes; several extender replicas publishing agree.
type Publisher struct {
	Ring      api.RecordKeyring
	Client    kubernetes.Interface
	Namespace string
	Name      string
}

// Data is the ConfigMap data for keys.
func Data(keys api.RecordKeys) map[string]string {
	out := map[string]string{}
	if len(keys.Current) > 0 {
		out[api.RecordKeyCurrent] = api.NodeKeyAnnotation(keys.Current)
	}
	if len(keys.Previous) > 0 {
		out[api.RecordKeyPrevious] = api.NodeKeyAnnotation(keys.Previous)
	}
	return out
}

// Sync publishes the keys in force once; it reports whether it changed the
// ConfigMap.
func (p *Publisher) Sync(ctx context.Context) (bool, error) {
	return configmapdata.Sync(ctx, p.Client, p.Namespace, p.Name, "--record-public-key-configmap", Data(api.KeysOf(p.Ring)))
}

// Start publishes the keys in force before it returns, retrying until it
// succeeds or ctx ends (the extender serves no bind before the device
// plugins can read its public key), then keeps the ConfigMap up to date
// every interval (DefaultInterval when 0) until ctx ends.
func (p *Publisher) Start(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultInterval
	}
	log := klog.FromContext(ctx).WithValues("configMap", klog.KRef(p.Namespace, p.Name))
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		if _, err := p.Sync(ctx); err != nil {
			log.Error(err, "Publishing the record public keys failed; binds wait for it, retrying", "in", interval)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("publishing the record public keys in ConfigMap %s/%s: %w", p.Namespace, p.Name, err)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if changed, err := p.Sync(ctx); err != nil {
			log.Error(err, "Publishing the record public keys failed; retrying")
		} else if changed {
			log.Info("Record public keys published")
		}
	}, interval)
	return nil
}

// Wait returns once dir holds valid keys (api.LoadRecordKeys), polling every
// interval (DefaultInterval when 0) until ctx ends. A device plugin waits
// so before it registers with the kubelet: at a first install the
// extender's public-key ConfigMap reaches the node's volume up to a minute
// after the extender published it, and until then the node offers no GPU
// memory, so no pod can be allocated a card the plugin could not check.
func Wait(ctx context.Context, dir string, interval time.Duration, log klog.Logger) error {
	if interval <= 0 {
		interval = DefaultInterval
	}
	logged := false
	return wait.PollUntilContextCancel(ctx, interval, true, func(context.Context) (bool, error) {
		_, err := api.LoadRecordKeys(dir)
		if err != nil && !logged {
			log.Info("Waiting for the extender's record public key (the extender publishes it in a ConfigMap this directory mounts); the node offers no GPU memory until then", "dir", dir, "err", err)
			logged = true
		}
		return err == nil, nil
	})
}
