package burstbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// DRAFloorDriver is the do-nothing DRA driver's name, and its DeviceClass's.
const DRAFloorDriver = "floor.burstbench.example.com"

// DRAFloor is the DRA variant of the device floor: a DRA kubelet plugin (the
// same k8s.io/dynamic-resource-allocation helper gpushare's driver runs on)
// that publishes one device shaped as gpushare's driver publishes a card —
// memory as consumable capacity, shared by many claims — and prepares a claim
// with nothing (no CDI device). Claims of its DeviceClass take what gpushare's
// claims take through kube-scheduler's DRA allocator, the resource claim
// controller and the kubelet's DRA manager, without gpushare: the floor a
// gpushare claim cannot beat on that node.
type DRAFloor struct {
	// Node is the node's name; RegistryDir the kubelet's plugin registration
	// directory as this process sees it; PluginDir where the plugin's socket
	// goes (a path the kubelet can dial).
	Node, RegistryDir, PluginDir string
	// GiB is the device's memory capacity.
	GiB int64
}

// Start creates the floor's DeviceClass, serves the plugin and publishes its
// slice, and waits up to timeout for the slice; stop ends the plugin and
// deletes the class and the slice.
func (f DRAFloor) Start(ctx context.Context, client kubernetes.Interface, timeout time.Duration) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DRAFloorDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DRAFloorDriver)},
		}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		cancel()
		return nil, fmt.Errorf("DRA floor DeviceClass: %w", err)
	}
	var helper *kubeletplugin.Helper
	stop = func() {
		if helper != nil {
			helper.Stop()
		}
		cancel()
		bg := context.Background()
		_ = client.ResourceV1().DeviceClasses().Delete(bg, DRAFloorDriver, metav1.DeleteOptions{})
		_ = client.ResourceV1().ResourceSlices().DeleteCollection(bg, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + DRAFloorDriver})
	}
	for _, dir := range []string{f.RegistryDir, f.PluginDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			stop()
			return nil, fmt.Errorf("DRA floor: %w", err)
		}
	}
	_ = os.Remove(filepath.Join(f.RegistryDir, DRAFloorDriver+"-reg.sock"))
	helper, err = kubeletplugin.Start(klog.NewContext(ctx, klog.Background().WithName("dra-floor")), draFloorPlugin{},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(f.Node),
		kubeletplugin.DriverName(DRAFloorDriver),
		kubeletplugin.RegistrarDirectoryPath(f.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(f.PluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		stop()
		return nil, fmt.Errorf("DRA floor plugin: %w", err)
	}
	inv := api.Inventory{Unit: api.UnitGiB, Cards: []api.Card{{Index: 0, UUID: "GPU-00000000-0000-0000-0000-0000000f100r", Model: "floor", Units: f.GiB, MemoryMiB: f.GiB << 10, State: api.CardHealthy}}}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		f.Node: {Slices: []resourceslice.Slice{{Devices: api.DefaultNames().DRADevices(inv, nil)}}},
	}}
	if err := helper.PublishResources(ctx, res); err != nil {
		stop()
		return nil, fmt.Errorf("DRA floor slice: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + DRAFloorDriver})
		return err == nil && len(list.Items) > 0, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("DRA floor: no slice published in %v: %w", timeout, err)
	}
	return stop, nil
}

// FloorClaim is a claim of gib GiB of the floor's device (the shape of
// gpushare's memory claims).
func FloorClaim(gib int64) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "floor",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: DRAFloorDriver,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				api.DRACapacityMemory: api.DRAQuantity(gib, api.UnitGiB),
			}},
		},
	}}}}
}

// draFloorPlugin prepares every claim with nothing.
type draFloorPlugin struct{}

func (draFloorPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var devices []kubeletplugin.Device
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				devices = append(devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
			}
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (draFloorPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (draFloorPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (draFloorPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
