package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
)

// SocketPath is the plugin's socket.
func (p *Plugin) SocketPath() string { return filepath.Join(p.cfg.PluginDir, p.cfg.SocketName) }

// KubeletSocketPath is the kubelet's registration socket.
func (p *Plugin) KubeletSocketPath() string {
	return filepath.Join(p.cfg.PluginDir, filepath.Base(pluginapi.KubeletSocket))
}

// Run serves the kubelet until ctx is done: it listens on SocketPath,
// registers with the kubelet, and starts over (new socket, new
// registration) when the kubelet re-creates kubelet.sock (a kubelet
// restart), when the plugin's socket disappears, or when restart receives
// (SIGHUP). The allocation ledger survives restarts; the records on the pods
// survive the process.
func (p *Plugin) Run(ctx context.Context, restart <-chan os.Signal) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", p.cfg.PluginDir, err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(p.cfg.PluginDir); err != nil {
		return fmt.Errorf("watch device-plugin directory %s: %w", p.cfg.PluginDir, err)
	}
	go p.RunReconciler(ctx)
	for {
		stop, dropped, err := p.serve()
		if err != nil {
			return err
		}
		regErr := p.register(ctx)
		if regErr != nil {
			p.log.Error(regErr, "Registration with the kubelet failed; retrying when kubelet.sock is re-created or in 5s")
		}
		reason := p.wait(ctx, w, restart, dropped, regErr != nil)
		stop()
		if ctx.Err() != nil {
			return nil
		}
		p.log.Info("Restarting the device plugin server", "reason", reason)
	}
}

// reasonDropped is wait's answer when the kubelet ended a ListAndWatch of
// the server while it serves: the kubelet dropped the plugin (kubelet v1.34
// disconnects a just-registered client when it handles the end of the
// previous connection late; or the kubelet is stopping) and the plugin must
// serve and register again. A new socket, not only a new registration: a
// restarting kubelet wipes the directory, and a kubelet dialing a removed
// socket blocks its registration for 10 s and then forgets the client that
// registered meanwhile.
const reasonDropped = "the kubelet ended ListAndWatch"

// wait blocks until something calls for a restart and says what.
func (p *Plugin) wait(ctx context.Context, w *fsnotify.Watcher, restart <-chan os.Signal, dropped <-chan struct{}, retry bool) string {
	var tick <-chan time.Time
	if retry {
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return "shutting down"
		case s := <-restart:
			return fmt.Sprintf("signal %v", s)
		case <-tick:
			return "retrying registration"
		case <-dropped:
			return reasonDropped
		case err := <-w.Errors:
			p.log.Error(err, "Watching the device-plugin directory")
		case e := <-w.Events:
			if e.Name == p.KubeletSocketPath() && e.Has(fsnotify.Create) {
				// A late event for the kubelet we registered with already
				// (e.g. after restarting for our own socket's removal) must
				// not restart us again: a second registration racing the
				// kubelet's handling of the first can lose the resource.
				if fi, err := os.Stat(p.KubeletSocketPath()); err == nil && p.registeredWith != nil && os.SameFile(fi, p.registeredWith) {
					continue
				}
				return "kubelet.sock re-created (kubelet restarted)"
			}
			if e.Name == p.SocketPath() && (e.Has(fsnotify.Remove) || e.Has(fsnotify.Rename)) {
				if _, err := os.Stat(p.SocketPath()); errors.Is(err, os.ErrNotExist) {
					return "plugin socket removed"
				}
			}
		}
	}
}

// served is the device plugin API as one server serves it: a ListAndWatch
// that ends while the server is not stopping was ended by the kubelet, and
// is reported on dropped.
type served struct {
	*Plugin
	stopping atomic.Bool
	dropped  chan struct{}
}

// ListAndWatch implements the device plugin API.
func (s *served) ListAndWatch(e *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	err := s.Plugin.ListAndWatch(e, stream)
	if !s.stopping.Load() {
		select {
		case s.dropped <- struct{}{}:
		default:
		}
	}
	return err
}

// serve listens on the socket and serves the device plugin API; stop ends
// it; dropped receives when the kubelet ends a ListAndWatch before stop.
func (p *Plugin) serve() (stop func(), dropped <-chan struct{}, err error) {
	path := p.SocketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	s := &served{Plugin: p, dropped: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil {
			p.log.Error(err, "Device plugin server stopped")
		}
	}()
	return func() {
		s.stopping.Store(true)
		srv.Stop()
		<-done
		_ = os.Remove(path)
	}, s.dropped, nil
}

// register tells the kubelet about the plugin.
func (p *Plugin) register(ctx context.Context) error {
	p.registeredWith = nil
	before, _ := os.Stat(p.KubeletSocketPath())
	conn, err := grpc.NewClient("unix://"+p.KubeletSocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet socket %s: %w", p.KubeletSocketPath(), err)
	}
	defer func() { _ = conn.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: string(api.ResourceName),
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	}, grpc.WaitForReady(false))
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", api.ResourceName, p.KubeletSocketPath(), err)
	}
	p.registeredWith = before
	p.log.Info("Registered with the kubelet", "resource", api.ResourceName, "socket", p.SocketPath())
	return nil
}
