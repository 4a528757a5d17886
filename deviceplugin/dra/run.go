package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
}

// Run serves d as the node's DRA kubelet plugin until ctx ends: it
// registers with the kubelet, answers NodePrepareResources and
// NodeUnprepareResources, and publishes the node's ResourceSlice (the
// node's healthy, not isolated cards), again whenever a card's state
// changes.
func Run(ctx context.Context, client kubernetes.Interface, d *Driver, o RunOptions) error {
	logger := klog.FromContext(ctx).WithName("dra")
	if o.RegistryDir == "" {
		o.RegistryDir = KubeletRegistryDir
	}
	if o.PluginDir == "" {
		o.PluginDir = filepath.Join(KubeletPluginsDir, d.Name)
	}
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
	for {
		changed := d.Store.Changed()
		if err := helper.PublishResources(ctx, d.Resources()); err != nil {
			return fmt.Errorf("publish the node's ResourceSlice: %w", err)
		}
		logger.Info("Published the node's cards", "pool", d.Pool, "devices", len(d.Resources().Pools[d.Pool].Slices[0].Devices))
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}
