package burstbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/test/cluster"
)

// FloorSocket is the do-nothing device plugin's socket name in a node's
// device-plugins directory.
const FloorSocket = "burstbench-floor.sock"

// ServeFloorPlugins serves, in each kubelet device-plugins directory
// (where kubelet.sock is), a device plugin that does nothing: it advertises
// devices[i] healthy devices of resource (IDs as long as gpushare's unit IDs,
// so the kubelet's bookkeeping is alike), answers Allocate with nothing, and
// has neither preferences nor pre-start calls. Pods asking for resource are
// the floor a device-plugin pod cannot beat on those nodes: the kubelet's
// device manager and the scheduler's resource counting, no gpushare. stop
// ends the plugins (the kubelet then marks their devices unhealthy).
func ServeFloorPlugins(ctx context.Context, dirs []string, resource string, devices []int) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var servers []*grpc.Server
	stop = func() {
		cancel()
		for _, s := range servers {
			s.Stop()
		}
	}
	for i, dir := range dirs {
		sock := filepath.Join(dir, FloorSocket)
		_ = os.Remove(sock)
		l, err := net.Listen("unix", sock)
		if err != nil {
			stop()
			return nil, fmt.Errorf("floor plugin in %s: %w", dir, err)
		}
		s := grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(s, &floorPlugin{ctx: ctx, devices: devices[i]})
		servers = append(servers, s)
		go func() { _ = s.Serve(l) }()
		if err := registerFloor(ctx, filepath.Join(dir, "kubelet.sock"), resource); err != nil {
			stop()
			return nil, fmt.Errorf("floor plugin in %s: %w", dir, err)
		}
	}
	return stop, nil
}

// FloorNode is a node to serve the device floor on: its name, its kubelet's
// device-plugins directory and how many devices to advertise there.
type FloorNode struct {
	Name, Dir string
	Devices   int
}

// StartFloor serves the floor plugins on nodes (ServeFloorPlugins) and
// waits, up to timeout, until every node shows its devices allocatable.
func StartFloor(ctx context.Context, client kubernetes.Interface, resource corev1.ResourceName, nodes []FloorNode, timeout time.Duration) (stop func(), err error) {
	dirs, devices := make([]string, len(nodes)), make([]int, len(nodes))
	for i, n := range nodes {
		dirs[i], devices[i] = n.Dir, n.Devices
	}
	if stop, err = ServeFloorPlugins(ctx, dirs, string(resource), devices); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if _, err := cluster.WaitNode(ctx, client, n.Name, timeout, "offering the device floor", func(node *corev1.Node) bool {
			q := node.Status.Allocatable[resource]
			return q.Value() == int64(n.Devices)
		}); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

func registerFloor(ctx context.Context, kubelet, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: FloorSocket, ResourceName: resource, Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

type floorPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ctx     context.Context
	devices int
}

func (*floorPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (f *floorPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	devs := make([]*pluginapi.Device, f.devices)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("FLR-00000000-0000-0000-0000-000000000000::%d", i), Health: pluginapi.Healthy}
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-f.ctx.Done():
	case <-s.Context().Done():
	}
	return nil
}

func (*floorPlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (*floorPlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for range r.GetContainerRequests() {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return out, nil
}

func (*floorPlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
