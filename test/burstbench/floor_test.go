package burstbench

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
)

// registrar is the kubelet's registration service: it keeps each request.
type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.got <- req
	return &pluginapi.Empty{}, nil
}

// The floor plugin registers its resource with the kubelet, advertises as
// many healthy devices as asked, with IDs as long as gpushare's unit IDs,
// answers each container of an Allocate with nothing, and ends its
// ListAndWatch when stopped.
func TestFloorPluginServesDevicesThatDoNothing(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{got: make(chan *pluginapi.RegisterRequest, 1)}
	s := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(s, reg)
	go func() { _ = s.Serve(l) }()
	defer s.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop, err := ServeFloorPlugins(ctx, []string{dir}, "example.com/floor", []int{7})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	req := <-reg.got
	if req.ResourceName != "example.com/floor" || req.Endpoint != FloorSocket || req.Version != pluginapi.Version {
		t.Fatalf("registration %+v", req)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, FloorSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Devices); n != 7 {
		t.Fatalf("%d devices, want 7", n)
	}
	for i, d := range list.Devices {
		if d.Health != pluginapi.Healthy || len(d.ID) != len(api.UnitID("GPU-29f2c701-98c3-f608-feec-74eddebba4bf", int64(i))) {
			t.Errorf("device %+v: want healthy, its ID as long as a gpushare unit ID", d)
		}
	}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{list.Devices[0].ID}}, {DevicesIds: []string{list.Devices[1].ID}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 || len(resp.ContainerResponses[0].Envs)+len(resp.ContainerResponses[0].Mounts)+len(resp.ContainerResponses[0].Devices) != 0 {
		t.Errorf("Allocate of two containers: %+v, want two empty answers", resp)
	}
	stop()
	if _, err := stream.Recv(); err == nil {
		t.Error("ListAndWatch goes on after stop")
	}
}
