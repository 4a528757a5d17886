package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// SocketPath is the plugin's socket (example.com/gpu-mem).
func (p *Plugin) SocketPath() string { return filepath.Join(p.cfg.PluginDir, p.cfg.SocketName) }

// WholeSocketPath is the socket of the whole-card resource (example.com/gpu),
// served when Config.WholeCards is set.
func (p *Plugin) WholeSocketPath() string {
	return filepath.Join(p.cfg.PluginDir, p.cfg.WholeSocketName)
}

// endpoint is one resource the plugin registers with the kubelet: its own
// socket, registration and device plugin service. The plugin has two, gpu-mem
// units and whole cards (units.go, cards.go), run side by side by Run.
type endpoint struct {
	socketName string
	resource   string
	server     pluginapi.DevicePluginServer
	options    *pluginapi.DevicePluginOptions
	// registeredWith is the kubelet.sock registered with (its Run goroutine only).
	registeredWith os.FileInfo
	// tried, when set, is closed after the first registration attempt.
	tried     chan struct{}
	triedOnce sync.Once
}

// endpoint is the resource's endpoint, to serve and register.
func (s *server[R]) endpoint() *endpoint {
	return &endpoint{socketName: s.res.socketName, resource: string(s.res.name), server: s, options: s.res.options}
}

func (e *endpoint) socketPath(p *Plugin) string { return filepath.Join(p.cfg.PluginDir, e.socketName) }

// KubeletSocketPath is the kubelet's registration socket.
func (p *Plugin) KubeletSocketPath() string {
	return filepath.Join(p.cfg.PluginDir, filepath.Base(pluginapi.KubeletSocket))
}

// Run serves the kubelet until ctx is done: it listens on SocketPath,
// registers with the kubelet, and starts over (new socket, new
// registration) when the kubelet re-creates kubelet.sock (a kubelet
// restart), when the plugin's socket disappears, when the kubelet ends
// ListAndWatch, when it has not opened ListAndWatch within
// Config.ListAndWatchGrace of a registration, or when restart receives
// (SIGHUP). The allocation ledger survives restarts; the records on the pods
// survive the process.
//
// With Config.WholeCards it serves and registers the whole-card resource as
// well, on its own socket, restarted on the same events (restart, SIGHUP,
// restarts both); an error of either ends both.
func (p *Plugin) Run(ctx context.Context, restart <-chan os.Signal) error {
	// The record writer outlives ctx until the endpoints have drained (serve): an admission
	// still in flight when the plugin is told to stop queues its record for it.
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	defer end()
	go p.RunReconciler(ctx)
	go p.rec.runRecordWriter(life)
	p.reg.publishServing()
	units := p.units.endpoint()
	units.tried = make(chan struct{})
	if !p.cfg.WholeCards {
		return p.reg.runEndpoint(ctx, restart, units)
	}
	whole := p.whole.endpoint()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r1, r2 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-restart:
				for _, r := range []chan os.Signal{r1, r2} {
					select {
					case r <- s:
					default:
					}
				}
			}
		}
	}()
	errs := make(chan error, 2)
	go func() { errs <- p.reg.runEndpoint(ctx, r1, units) }()
	go func() {
		// gpu-mem registers first (the order people and tests see).
		select {
		case <-units.tried:
		case <-ctx.Done():
		}
		errs <- p.reg.runEndpoint(ctx, r2, whole)
	}()
	err := <-errs
	cancel()
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}

// runEndpoint serves and registers one endpoint until ctx is done (see Run).
func (p registrar) runEndpoint(ctx context.Context, restart <-chan os.Signal, ep *endpoint) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", p.cfg.PluginDir, err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(p.cfg.PluginDir); err != nil {
		return fmt.Errorf("watch device-plugin directory %s: %w", p.cfg.PluginDir, err)
	}
	for {
		stop, ch, err := p.serve(ep)
		if err != nil {
			return err
		}
		regErr := p.register(ctx, ep)
		if ep.tried != nil {
			ep.triedOnce.Do(func() { close(ep.tried) })
		}
		if regErr != nil {
			p.log.Error(regErr, "Registration with the kubelet failed; retrying when kubelet.sock is re-created or in 5s")
		}
		reason := p.wait(ctx, w, restart, ch, regErr != nil, ep)
		stop(ctx.Err() != nil)
		if ctx.Err() != nil {
			return nil
		}
		p.log.Info("Restarting the device plugin server", "resource", ep.resource, "reason", reason)
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

// reasonNotWatched is wait's answer when the kubelet did not open
// ListAndWatch within the grace after the registration: it dropped the
// registration before using it (seen with kubelet v1.34 when one kubelet
// restart made the plugin register twice in a few milliseconds: the kubelet
// closed the second client while handling the first's end), and without a
// new registration the node would offer no gpu-mem until the next restart.
const reasonNotWatched = "the kubelet did not open ListAndWatch after the registration"

// wait blocks until something calls for a restart and says what.
func (p registrar) wait(ctx context.Context, w *fsnotify.Watcher, restart <-chan os.Signal, ch servedChans, retry bool, ep *endpoint) string {
	var tick, grace <-chan time.Time
	if retry {
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		tick = t.C
	} else if p.cfg.ListAndWatchGrace > 0 {
		t := time.NewTimer(p.cfg.ListAndWatchGrace)
		defer t.Stop()
		grace = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return "shutting down"
		case s := <-restart:
			return fmt.Sprintf("signal %v", s)
		case <-tick:
			return "retrying registration"
		case <-ch.watched:
			grace = nil
		case <-grace:
			return reasonNotWatched
		case <-ch.dropped:
			return reasonDropped
		case err := <-w.Errors:
			p.log.Error(err, "Watching the device-plugin directory")
		case e := <-w.Events:
			if e.Name == p.KubeletSocketPath() && e.Has(fsnotify.Create) {
				// A late event for the kubelet we registered with already
				// (e.g. after restarting for our own socket's removal) must
				// not restart us again: a second registration racing the
				// kubelet's handling of the first can lose the resource.
				if fi, err := os.Stat(p.KubeletSocketPath()); err == nil && ep.registeredWith != nil && os.SameFile(fi, ep.registeredWith) {
					continue
				}
				return "kubelet.sock re-created (kubelet restarted)"
			}
			if e.Name == ep.socketPath(p.Plugin) && (e.Has(fsnotify.Remove) || e.Has(fsnotify.Rename)) {
				if _, err := os.Stat(ep.socketPath(p.Plugin)); errors.Is(err, os.ErrNotExist) {
					return "plugin socket removed"
				}
			}
		}
	}
}

// served is the device plugin API as one server serves it: a ListAndWatch
// that starts is reported on watched; one that ends while the server is not
// stopping was ended by the kubelet, and is reported on dropped.
type served struct {
	pluginapi.DevicePluginServer
	stopping atomic.Bool
	servedChans
	// open counts the kubelet's ListAndWatch streams open on the endpoint.
	open *atomic.Int32
	// opened is called after each change of open.
	opened func()
}

// servedChans are what one server reports to Run.
type servedChans struct {
	watched chan struct{}
	dropped chan struct{}
}

// ListAndWatch implements the device plugin API.
func (s *served) ListAndWatch(e *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	select {
	case s.watched <- struct{}{}:
	default:
	}
	s.open.Add(1)
	s.opened()
	err := s.DevicePluginServer.ListAndWatch(e, stream)
	s.open.Add(-1)
	s.opened()
	if !s.stopping.Load() {
		select {
		case s.dropped <- struct{}{}:
		default:
		}
	}
	return err
}

// serve listens on the socket and serves the device plugin API; stop ends
// it; ch.watched receives when the kubelet opens ListAndWatch, ch.dropped
// when it ends one before stop.
//
// stop(true), when the plugin is told to stop, drains first (see drain): the kubelet's
// ListAndWatch stays open and calls in flight are answered before the server closes.
func (p registrar) serve(ep *endpoint) (stop func(drain bool), ch servedChans, err error) {
	path := ep.socketPath(p.Plugin)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, servedChans{}, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, servedChans{}, fmt.Errorf("listen on %s: %w", path, err)
	}
	ch = servedChans{watched: make(chan struct{}, 1), dropped: make(chan struct{}, 1)}
	s := &served{DevicePluginServer: ep.server, servedChans: ch, open: p.streams(ep.resource), opened: p.publishServing}
	var calls inFlight
	srv := grpc.NewServer(grpc.UnaryInterceptor(calls.count))
	pluginapi.RegisterDevicePluginServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil {
			p.log.Error(err, "Device plugin server stopped")
		}
	}()
	return func(drain bool) {
		if drain {
			calls.drain(p.CallLimit(), drainQuiet)
		}
		s.stopping.Store(true)
		srv.Stop()
		<-done
		_ = os.Remove(path)
	}, ch, nil
}

// streams is the count of ListAndWatch streams open on resource's endpoint.
func (p registrar) streams(resource string) *atomic.Int32 {
	n, _ := p.open.LoadOrStore(resource, new(atomic.Int32))
	return n.(*atomic.Int32)
}

// Serving reports whether the kubelet has a ListAndWatch stream open on every resource this
// plugin serves (the memory units and, with Config.WholeCards, the whole cards), and the
// resources it has none on. Only a serving plugin's devices are the kubelet's to allocate: the
// chart's readiness probe (/readyz) waits for it, so that a rolling update stops the old plugin
// only once the kubelet streams from the new one.
func (p *Plugin) Serving() (bool, []string) {
	want := []string{string(p.cfg.Names.ResourceName())}
	if p.cfg.WholeCards {
		want = append(want, string(p.cfg.Names.WholeResourceName()))
	}
	var missing []string
	for _, r := range want {
		if p.reg.streams(r).Load() <= 0 {
			missing = append(missing, r)
		}
	}
	return len(missing) == 0, missing
}

// publishServing puts whether the kubelet streams from this plugin (Serving) in the inventory
// the node publishes (api.Inventory.NotServing). The stream ends the moment the kubelet dies, and
// nothing else the extender reads changes while it is down: its Node keeps the capacity it last
// posted and the plugin's pod stays Ready, but the next kubelet fails every GPU pod bound there
// meanwhile, as it admits them before the plugin has registered with it.
func (p registrar) publishServing() {
	reason := ""
	if ok, missing := p.Serving(); !ok {
		reason = fmt.Sprintf("the kubelet has no ListAndWatch stream open on its %s (the kubelet is down or restarting, or the plugin has not registered with it yet)", strings.Join(missing, ", "))
	}
	if p.store.SetNotServing(reason) {
		p.log.Info("Serving the kubelet changed", "serving", reason == "", "reason", reason)
	}
}

// register tells the kubelet about the endpoint.
func (p registrar) register(ctx context.Context, ep *endpoint) error {
	ep.registeredWith = nil
	before, _ := os.Stat(p.KubeletSocketPath())
	conn, err := grpc.NewClient("unix://"+p.KubeletSocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet socket %s: %w", p.KubeletSocketPath(), err)
	}
	defer func() { _ = conn.Close() }()
	rctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     ep.socketName,
		ResourceName: ep.resource,
		Options:      ep.options,
	}, grpc.WaitForReady(false))
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", ep.resource, p.KubeletSocketPath(), err)
	}
	ep.registeredWith = before
	p.log.Info("Registered with the kubelet", "resource", ep.resource, "socket", ep.socketPath(p.Plugin))
	return nil
}
