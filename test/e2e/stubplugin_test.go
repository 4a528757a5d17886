package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stubPlugin is a minimal device plugin over real gRPC, for testing the node
// agent without gpushare's plugin: it advertises fixed devices, answers
// Allocate with an env var and one mount per device, and re-registers when
// the kubelet socket is re-created (a kubelet restart). It runs in the test
// process; its socket lives in the node's device-plugins directory, which the
// agent bind-mounts at /var/lib/kubelet/device-plugins.
type stubPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	dir, resource, endpoint string
	devices                 []string

	mu         sync.Mutex
	server     *grpc.Server
	kubeletIno uint64
	regs       int
}

func newStubPlugin(dir, resource string, devices []string) *stubPlugin {
	return &stubPlugin{dir: dir, resource: resource, endpoint: "e2e-stub.sock", devices: devices}
}

// run serves and registers until ctx ends, re-registering after a kubelet
// restart.
func (p *stubPlugin) run(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	defer p.stopServer()
	for {
		// A new kubelet (device manager) wipes the directory, our socket
		// included, and creates a new kubelet.sock (whose inode number may be
		// the old one's, reused): our socket gone means "register again".
		_, ownErr := os.Stat(filepath.Join(p.dir, p.endpoint))
		if ino, ok := inode(filepath.Join(p.dir, "kubelet.sock")); ok && (ino != p.kubeletIno || ownErr != nil) {
			if err := p.serveAndRegister(ctx); err != nil {
				t.Logf("stub plugin: %v (will retry)", err)
			} else {
				p.mu.Lock()
				p.kubeletIno = ino
				p.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *stubPlugin) stopServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
}

func (p *stubPlugin) serveAndRegister(ctx context.Context) error {
	p.stopServer()
	sock := filepath.Join(p.dir, p.endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen %s: %w", sock, err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	go func() { _ = s.Serve(l) }()
	p.mu.Lock()
	p.server = s
	p.mu.Unlock()

	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.endpoint, ResourceName: p.resource,
	})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	p.mu.Lock()
	p.regs++
	p.mu.Unlock()
	return nil
}

// registrations counts successful registrations with a kubelet.
func (p *stubPlugin) registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.regs
}

func (p *stubPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *stubPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range p.devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *stubPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := append([]string(nil), c.DevicesIds...)
		sort.Strings(ids)
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"STUB_DEVICES": strings.Join(ids, ",")}}
		for _, id := range ids {
			cr.Mounts = append(cr.Mounts, &pluginapi.Mount{ContainerPath: "/dev/stub/" + id, HostPath: "/dev/null", ReadOnly: true})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func inode(path string) (uint64, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return sys.Ino, true
}
