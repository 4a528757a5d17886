package dra

import (
	"context"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/response"
)

// Driver is the DRA kubelet plugin of one node.
type Driver struct {
	// Name is the driver's name (DriverName).
	Name string
	// Pool is the node's pool: the node's name.
	Pool string
	// Store holds the node's cards, their health and isolation.
	Store *inventory.Store
	// Grant shapes what a container gets for its share of a card, as for
	// the device plugin (Strategy, DeviceIDStrategy, MPS, Names).
	Grant response.Config
	// CDIDir is where claim specs are written (DefaultCDIDir).
	CDIDir string
	// NvidiaCDIKind, when set (e.g. nvidia.com/gpu), also names the card's
	// device in NVIDIA's CDI spec (nvidia-ctk cdi generate) for each
	// container, for a runtime in CDI mode: <kind>=<card UUID>.
	NvidiaCDIKind string
	// Held, when set, is the memory device-plugin pods still hold per card
	// (Held), withheld from the slice.
	Held func() map[int]int64

	// published is set once the slice was published: the driver serves.
	published atomic.Bool

	mu sync.Mutex
	// shares are the claims prepared, each checked (CheckAllocation).
	shares prepared
}

// Serving says whether the driver serves: registered with the kubelet
// and its slice published (else why not).
func (d *Driver) Serving() (bool, string) {
	if d.published.Load() {
		return true, ""
	}
	return false, "the DRA driver has not published the node's ResourceSlice"
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// Resources are the slice to publish for the inventory in force.
func (d *Driver) Resources() resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.Pool: {Slices: []resourceslice.Slice{{Devices: Devices(d.Grant.Names, d.Store.Inventory(), d.held())}}},
	}}
}

func (d *Driver) held() map[int]int64 {
	if d.Held == nil {
		return nil
	}
	return d.Held()
}

// PrepareResourceClaims gives each claim's containers their share of the
// card the scheduler allocated: a CDI device per allocated card carrying the
// device plugin's environment and mounts for the consumed memory.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim)
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	unit := d.Store.Unit()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shares == nil {
		d.shares = prepared{}
	}
	share, err := CheckAllocation(claim, d.Name, d.Pool, unit, Devices(d.Grant.Names, d.Store.Inventory(), d.held()), d.shares.others(claim.UID))
	if err != nil {
		return nil, err
	}
	var devices []kubeletplugin.Device
	var specs []cdispec.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.Name {
			continue
		}
		card, err := d.card(r.Pool, r.Device)
		if err != nil {
			return nil, err
		}
		q, _ := api.DRAConsumedMemory(r, api.DRAQuantity(unit.UnitsFromMiB(card.MemoryMiB), unit))
		units := api.DRAUnits(q, unit)
		name := string(claim.UID) + "-" + r.Request + "-" + r.Device
		specs = append(specs, cdispec.Device{Name: name, ContainerEdits: editsOf(d.Grant.Share(card, units, unit))})
		ids := []string{d.cdiKind() + "=" + name}
		if d.NvidiaCDIKind != "" {
			ids = append(ids, d.NvidiaCDIKind+"="+card.UUID)
		}
		devices = append(devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: ids})
	}
	if err := writeSpec(d.CDIDir, d.cdiKind(), claim.UID, specs); err != nil {
		return nil, err
	}
	d.shares[claim.UID] = share
	return devices, nil
}

// cdiKind is the kind of the claims' CDI specs.
func (d *Driver) cdiKind() string { return d.Grant.Names.OrDefault().CDIClaimKind() }

// card is the card an allocation result names on this node.
func (d *Driver) card(pool, device string) (nvml.Card, error) {
	index, ok := CardIndex(device)
	if pool != d.Pool || !ok {
		return nvml.Card{}, errNotOurs(pool, device)
	}
	for _, c := range d.Store.Cards() {
		if c.Index == index {
			return c, nil
		}
	}
	return nvml.Card{}, errNotOurs(pool, device)
}

// UnprepareResourceClaims removes the claims' CDI specs.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claims {
		out[c.UID] = removeSpec(d.CDIDir, d.cdiKind(), c.UID)
		delete(d.shares, c.UID)
	}
	return out, nil
}

// HandleError logs background errors (publishing the slice); they are
// retried.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
}

// WatchHealthStatus: card health reaches the scheduler through the slice
// (an unhealthy or isolated card is not published), not through the
// kubelet's health API.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
