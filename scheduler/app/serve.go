package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/time/rate"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/httpserve"
	"github.com/gpushare/gpushare/internal/periodic"
	"github.com/gpushare/gpushare/internal/recordkey"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/cardlimits"
	"github.com/gpushare/gpushare/scheduler/server"
)

// Clients are the extender's connections to the API server.
type Clients struct {
	// Read feeds the informers and reads pods they have not delivered yet.
	Read kubernetes.Interface
	// Bind writes the Bindings (nil: Read). It has no client-side rate
	// limit of its own: each Binding takes its token from Budget in the bind
	// verb, which knows the bind's deadline.
	Bind kubernetes.Interface
	// Budget is the API request budget Read also waits on (nil: none).
	Budget *rate.Limiter
	// Auth asks the API server about the tokens at the guarded routes
	// (--admin-auth; nil: Read).
	Auth kubernetes.Interface
}

// readLimiter lets client-go wait on the extender's shared request budget.
type readLimiter struct{ *rate.Limiter }

func (l readLimiter) TryAccept() bool                { return l.Allow() }
func (l readLimiter) Accept()                        { _ = l.Limiter.Wait(context.Background()) }
func (l readLimiter) Stop()                          {}
func (l readLimiter) QPS() float32                   { return float32(l.Limit()) }
func (l readLimiter) Wait(ctx context.Context) error { return l.Limiter.Wait(ctx) }

// Serve runs the extender on ln (every route) and, when admin is not nil, the
// read-only routes on admin, with injected clients until ctx ends: the HTTP
// servers answer at once (readyz turns ready after the informers sync).
func Serve(ctx context.Context, o Options, clients Clients, ln, admin net.Listener) error {
	logger := klog.FromContext(ctx)
	policy, err := registry.Lookup(o.Policy)
	if err != nil {
		return err
	}
	mode, err := server.ParseFilterMode(o.FilterMode)
	if err != nil {
		return err
	}
	allowed, err := o.allowedPolicies()
	if err != nil {
		return err
	}
	names, err := o.Names.Names()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	keys, err := recordkey.Start(ctx, o.RecordKeyDir, o.RecordKeyInterval, logger.WithName("record-key"), reg)
	if err != nil {
		return err
	}
	if o.RecordPublicKeyConfigMap != "" {
		namespace, name, _ := configMapRef("--record-public-key-configmap", o.RecordPublicKeyConfigMap)
		pub := recordkey.Publisher{Ring: keys, Client: clients.Read, Namespace: namespace, Name: name}
		if err := pub.Start(ctx, o.RecordKeyInterval); err != nil {
			return err
		}
	}
	pluginSel, err := o.pluginSelector()
	if err != nil {
		return err
	}
	c := cache.New(cache.WithRecordKeys(keys), cache.WithNames(names), cache.WithDevicePluginSelector(pluginSel))
	factory := informers.NewSharedInformerFactory(clients.Read, o.ResyncPeriod)
	pods, err := c.Attach(factory)
	if err != nil {
		return err
	}
	workers := o.Parallelism
	workers = cmp.Or(workers, runtime.GOMAXPROCS(0))
	var dra *cache.DRA
	var draSource server.DRASource
	var draScore server.DRA
	if o.DRA {
		dra = cache.NewDRA(clients.Read, names, o.ResyncPeriod)
		draSource, draScore = dra, dra
	}
	srv, err := server.New(server.Config{Names: names, Cache: c, Client: clients.Read, BindClient: clients.Bind, WriteLimiter: clients.Budget, BindTimeout: o.BindTimeout, Pods: pods, PDBs: factory.Policy().V1().PodDisruptionBudgets().Lister(), Policy: policy, AllowedPolicies: allowed, FilterMode: mode, Registry: reg, Parallelism: workers, MaxBestNodes: o.MaxBestNodes, MaxBodyBytes: o.MaxRequestBytes, RecordKeys: keys, DRAUsage: draSource, DRA: draScore})
	if err != nil {
		return err
	}
	tlsConfig, err := o.serverTLS(logger)
	if err != nil {
		return err
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	guards, err := newAccessGuards(o, clients, ln.Addr())
	if err != nil {
		return err
	}
	httpSrv := httpserve.New(ctx, guards.verbsHandler(srv.Handler(reg)))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if dra != nil {
		if err := dra.Run(ctx); err != nil {
			return err
		}
	}
	publisher, nodesChanged, err := cardLimitsPublisher(o, names, clients, factory)
	if err != nil {
		return err
	}
	go func() {
		if err := c.WaitForSync(ctx, factory); err != nil {
			logger.Error(err, "Cache did not sync")
			return
		}
		logger.Info("Ready", "policy", policy.Name, "allowedPolicies", o.AllowedPolicies, "filterMode", mode, "names", names.String())
		warnNameMismatches(logger, names, factory.Core().V1().Nodes().Lister())
		if publisher != nil {
			publisher.Run(ctx, nodesChanged, cardLimitsResync)
		}
	}()
	go periodic.Run(ctx, clock.RealClock{}, 10*time.Second, nil, func() { c.CleanupExpired() }) // expired assumptions and reservations

	scopeSrv, scopeLn, err := nodeScopeServer(ctx, o, reg, logger)
	if err != nil {
		return err
	}
	servers := []*http.Server{httpSrv}
	listeners := []net.Listener{ln}
	if admin != nil {
		servers = append(servers, httpserve.New(ctx, guards.adminHandler(srv.ReadOnlyHandler(reg))))
		listeners = append(listeners, admin)
	}
	for i := range servers {
		logger.Info("Serving", "address", listeners[i].Addr().String(), "readOnly", i > 0, "https", i == 0 && tlsConfig != nil, "clientCertificates", i == 0 && o.ClientCAFile != "")
	}
	if scopeSrv != nil {
		servers, listeners = append(servers, scopeSrv), append(listeners, scopeLn)
		logger.Info("Serving the node-scope authorization webhook", "address", scopeLn.Addr().String(), "users", o.NodeScope.Users)
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func(hs *http.Server, l net.Listener) { errc <- hs.Serve(l) }(servers[i], listeners[i])
	}
	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	for _, hs := range servers {
		if err := hs.Shutdown(shutdownCtx); err != nil && serveErr == nil {
			serveErr = fmt.Errorf("http server shutdown: %w", err)
		}
	}
	return serveErr
}

// cardLimitsResync is how often the card-limits ConfigMap is checked even
// when no node changed (it repairs an edit by hand).
const cardLimitsResync = 5 * time.Minute

// cardLimitsPublisher returns the card-limits publisher and the channel that
// signals node changes to it; nil when o.CardLimitsConfigMap is empty. Call it
// before the factory starts.
func cardLimitsPublisher(o Options, names api.Names, clients Clients, factory informers.SharedInformerFactory) (*cardlimits.Publisher, <-chan struct{}, error) {
	if o.CardLimitsConfigMap == "" {
		return nil, nil, nil
	}
	namespace, name, err := o.cardLimitsRef()
	if err != nil {
		return nil, nil, err
	}
	changed := make(chan struct{}, 1)
	signal := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	nodes := factory.Core().V1().Nodes()
	if _, err := nodes.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    signal,
		UpdateFunc: func(_, n any) { signal(n) },
		DeleteFunc: signal,
	}); err != nil {
		return nil, nil, fmt.Errorf("node informer: %w", err)
	}
	return &cardlimits.Publisher{Nodes: nodes.Lister(), Client: clients.Read, Namespace: namespace, Name: name, Names: names}, changed, nil
}
