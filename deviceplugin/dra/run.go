package dra

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// Where the kubelet finds DRA plugins: the registration socket in
// KubeletRegistryDir, the driver's own socket under KubeletPluginsDir/<driver>.
const (
	KubeletRegistryDir = kubeletplugin.KubeletRegistryDir
	KubeletPluginsDir  = "/var/lib/kubelet/plugins"
)

// RunOptions place the plugin's sockets (empty: the kubelet's defaults).
type RunOptions struct {
	NodeName    string
	RegistryDir string
	PluginDir   string
	// Resync is how often the slice is computed again (DefaultResync).
	Resync time.Duration
}

// Run serves d as the node's DRA kubelet plugin until ctx ends: it
// registers with the kubelet, answers NodePrepareResources and
// NodeUnprepareResources, and publishes the node's ResourceSlice (the
// node's healthy, not isolated cards), again whenever a card's state
// changes.
func Run(ctx context.Context, client kubernetes.Interface, d *Driver, o RunOptions) error {
	logger := klog.FromContext(ctx).WithName("dra")
	o.RegistryDir = cmp.Or(o.RegistryDir, KubeletRegistryDir)
	o.PluginDir = cmp.Or(o.PluginDir, filepath.Join(KubeletPluginsDir, d.Name))
	for _, dir := range []string{o.RegistryDir, o.PluginDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA plugin directory: %w", err)
		}
	}
	helper, err := kubeletplugin.Start(klog.NewContext(ctx, logger), d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.DriverName(d.Name),
		kubeletplugin.RegistrarDirectoryPath(o.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(o.PluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start the DRA kubelet plugin %s: %w", d.Name, err)
	}
	defer helper.Stop()
	resync := o.Resync
	if resync <= 0 {
		resync = DefaultResync
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	var last []resourceapi.Device
	resynced := false
	for {
		changed := d.Store.Changed()
		res := d.Resources()
		// Handed to the slice controller when the devices changed, and at
		// every resync even when they did not: the controller then checks
		// the pool against the API server at once, so a slice someone
		// deleted (the kubelet deletes its node's slices when it starts)
		// is back within a resync instead of the controller's own 30 s.
		if devices := res.Pools[d.Pool].Slices[0].Devices; resynced || !apiequality.Semantic.DeepEqual(devices, last) {
			if err := helper.PublishResources(ctx, res); err != nil {
				return fmt.Errorf("publish the node's ResourceSlice: %w", err)
			}
			if !apiequality.Semantic.DeepEqual(devices, last) {
				logger.Info("Published the node's cards", "pool", d.Pool, "devices", len(devices))
			}
			last = devices
			d.published.Store(true)
		}
		resynced = false
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
			resynced = true
		}
	}
}

// DefaultResync is how often the slice is computed again besides a card's
// change of state: device-plugin pods finishing give their memory back.
const DefaultResync = 10 * time.Second
