package app

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/deviceplugin/dra"
	"github.com/gpushare/gpushare/deviceplugin/response"
)

// DRAOptions run the node agent as a DRA driver (deviceplugin/dra) instead
// of a device plugin: the node's cards go to pods through ResourceClaims.
type DRAOptions struct {
	Enabled     bool   `json:"-"`
	RegistryDir string `json:"-"`
	PluginDir   string `json:"-"`
	// CDIDir is where the claims' CDI specs are written for the container runtime (with --dra).
	CDIDir string `json:"cdiDir"`
	// NvidiaCDIKind also names each card's device in NVIDIA's CDI spec (nvidia-ctk cdi
	// generate), e.g. nvidia.com/gpu, for a runtime in CDI mode; empty: the NVIDIA runtime finds
	// the card from the environment, as with the device plugin.
	NvidiaCDIKind string `json:"nvidiaCDIKind"`
}

// runDRA serves the node's cards as a DRA driver until ctx ends.
// The memory that pods placed through the device plugin still hold on the
// node (it moved to DRA while they ran) is withheld from the slice until
// they finish (dra.Held). Memory sampling, its metrics and enforcement run
// as with the device plugin, each container measured against what its
// claims consumed (dra.ClaimGrants) and, for those device-plugin pods,
// their records (keys).
func runDRA(ctx context.Context, n agent, grant response.Config) error {
	log := klog.FromContext(ctx)
	o, names, store, cl, client := n.o, n.names, n.store, n.cl, n.client
	held := func() map[int]int64 {
		pods, err := cl.Pods()
		if err != nil {
			log.Error(err, "Reading the node's pods: withholding nothing")
			return nil
		}
		return dra.Held(names, store.Inventory(), o.NodeName, pods)
	}
	d := &dra.Driver{Name: names.DRADriver(), Pool: o.NodeName, Store: store, Grant: grant, CDIDir: o.DRA.CDIDir, NvidiaCDIKind: o.DRA.NvidiaCDIKind, Held: held}
	claims := &dra.ClaimGrants{Driver: d.Name, Pool: o.NodeName, Cards: store.Cards,
		Get: func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
			return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		}}
	memory, err := startMemory(ctx, n, nil, claims.Grants, d.Serving)
	if err != nil {
		return err
	}
	go runNodeDuties(ctx, o.NodeLockFile, nil, log, memory)
	log.Info("Serving the cards through DRA", "driver", d.Name, "cdiDir", d.CDIDir)
	return dra.Run(ctx, client, d, dra.RunOptions{NodeName: o.NodeName, RegistryDir: o.DRA.RegistryDir, PluginDir: o.DRA.PluginDir})
}
