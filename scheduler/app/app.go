// Package app wires the gpushare scheduler extender: it owns the program's
// command (NewCommand, started the one way internal/cli describes), its
// options (flags, each also settable from the environment for a
// Deployment), their validation, and Run, which builds the Kubernetes
// client, the informer-fed cache and the HTTP server and serves until the
// context ends.
package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/internal/httpserve"
	"github.com/gpushare/gpushare/internal/memlimit"
	"github.com/gpushare/gpushare/internal/recordkey"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/cardlimits"
	"github.com/gpushare/gpushare/scheduler/server"
)

// Options are the program's settings.
type Options struct {
	// ListenAddress is where the HTTP server listens, e.g. ":39999".
	ListenAddress string
	// AdminListenAddress, when set, is a second address serving only the
	// read-only routes (/healthz, /readyz, /metrics, /inspect), e.g. ":39998":
	// probes and Prometheus reach it while the verbs stay on ListenAddress
	// (127.0.0.1 in the chart's dedicated mode).
	AdminListenAddress string
	// Parallelism is how many goroutines evaluate the nodes of one filter or
	// prioritize call; 0 means one per CPU the process may use (GOMAXPROCS).
	Parallelism int
	// Kubeconfig is a kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// Policy names the allocator policy (allocator.Names()).
	Policy string
	// AllowedPolicies are the policies a pod may name in its
	// <domain>/policy annotation, besides Policy (always
	// allowed). Empty, the default: pods run under Policy only, so that
	// no tenant changes how the cluster is packed unless the operator says so.
	AllowedPolicies []string
	// FilterMode is "best" or "all" (server.FilterModes).
	FilterMode string
	// MaxBestNodes caps the tied best nodes filter keeps in best mode
	// (server.Config.MaxBestNodes; 0: no cap).
	MaxBestNodes int
	// ResyncPeriod is the informers' resync period (0: none).
	ResyncPeriod time.Duration
	// KubeAPIQPS and KubeAPIBurst are the extender's API request budget,
	// shared by its reads and its writes (one Binding per pod). See
	// DefaultOptions for the arithmetic behind the defaults.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// BindTimeout bounds one bind call, waiting for the budget included;
	// it must stay below kube-scheduler's extender httpTimeout.
	BindTimeout time.Duration
	// CardLimitsConfigMap, "namespace/name", is the ConfigMap the extender
	// keeps up to date with the largest card in the cluster, for the
	// admission policy that refuses requests no card can hold (empty: off).
	// The ConfigMap must exist; the extender only updates it.
	CardLimitsConfigMap string
	// TLSCertFile and TLSPrivateKeyFile, when set, make the verbs' address
	// (ListenAddress) serve HTTPS; ClientCAFile, when also set, makes it
	// require a client certificate signed by that CA (kube-scheduler's
	// extender tlsConfig certFile/keyFile). The admin address stays HTTP.
	TLSCertFile       string
	TLSPrivateKeyFile string
	ClientCAFile      string
	// MaxRequestBytes bounds a request body (server.DefaultMaxBodyBytes).
	MaxRequestBytes int64
	// GoMemoryLimitFraction, when above 0 and GOMEMLIMIT is not set, makes
	// the Go runtime's soft memory limit this fraction of the container's
	// cgroup memory limit (internal/memlimit): with GOGC above 100 (the
	// chart's, docs/operations.md) the extender collects less often, and
	// still collects before the container's limit rather than at it.
	GoMemoryLimitFraction float64
	// GCPercent, when above 0 and GOGC is not set, is the Go garbage
	// collector's target (debug.SetGCPercent): the heap grows this many
	// percent over the live heap before a collection. The default, 400,
	// is the chart's (scheduler.extender.gcPercent): at 5,000 nodes Go's
	// own 100 collects often enough to double a filter call's p99
	// (docs/design.md, "Garbage collection and the 5,000-node p99"). 0
	// leaves Go's default.
	GCPercent int
	// RecordKeyDir, when set, is a directory (a mounted Secret) with the
	// key the extender signs every record with (api.LoadRecordKeys), read
	// again every RecordKeyInterval (a rotated Secret takes effect without a
	// restart; internal/recordkey; 0: recordkey.DefaultInterval).
	RecordKeyDir      string
	RecordKeyInterval time.Duration
	// Names are the resource names and the annotation domain (--domain,
	// --resource-name, --whole-resource-name), the same in every program.
	Names cli.NameFlags
	// AdminAuth guards /inspect and /metrics (access.go, --admin-auth).
	AdminAuth adminauth.Options
	// ClientCertNames, with ClientCAFile, are the names a client
	// certificate must carry to call the verbs (--client-cert-names).
	ClientCertNames []string
}

// DefaultOptions returns options that work in a cluster.
//
// The API budget: a bound pod costs the extender exactly one request (its
// Binding, carrying the assignment); reads come from the informers. We
// promise binds at 200 pods/s sustained, more than kube-scheduler's serial
// scheduling cycle feeds us (~85 pods/s measured here without an extender,
// on the order of 100 pods/s upstream at 5,000 nodes), so QPS 200. The burst
// of 400 lets a backlog of 2 s of binds go out at once. A bind whose token
// would come after the bind timeout less the write's allowance (4 s − 1 s:
// behind more than 400 + 3 × 200 = 1,000 binds when the bucket was full)
// fails at once instead, for kube-scheduler to retry.
func DefaultOptions() Options {
	return Options{
		ListenAddress: ":39999",
		Policy:        allocator.DefaultPolicy,
		FilterMode:    string(server.FilterBest),
		KubeAPIQPS:    200,
		KubeAPIBurst:  400,
		BindTimeout:   server.DefaultBindTimeout,
		MaxBestNodes:  server.DefaultMaxBestNodes,

		MaxRequestBytes:       server.DefaultMaxBodyBytes,
		GoMemoryLimitFraction: 0.9,
		GCPercent:             DefaultGCPercent,
		Names:                 cli.DefaultNameFlags(),
		AdminAuth:             adminauth.DefaultOptions(),
	}
}

// DefaultGCPercent is --gc-percent's default, the chart's gcPercent.
const DefaultGCPercent = 400

// envPrefix prefixes the environment variable of every flag:
// --filter-mode is GPUSHARE_FILTER_MODE.
const envPrefix = "GPUSHARE_"

// EnvName is the environment variable that sets the named flag.
func EnvName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// AddFlags defines the options' flags and klog's (-v, …) on fs, each bound to
// its environment variable (EnvName: GPUSHARE_POLICY, GPUSHARE_V, …).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ListenAddress, "listen", o.ListenAddress, "address the extender's HTTP server listens on")
	fs.StringVar(&o.AdminListenAddress, "admin-listen", o.AdminListenAddress, "optional second address serving only /healthz, /readyz, /metrics and /inspect")
	fs.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "goroutines evaluating the nodes of one filter/prioritize call; 0: one per CPU (GOMAXPROCS)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&o.Policy, "policy", o.Policy, "placement policy, one of "+strings.Join(allocator.Names(), ", "))
	fs.StringSliceVar(&o.AllowedPolicies, "allowed-policies", o.AllowedPolicies, "policies a pod may name in its <domain>/policy annotation (--domain), comma-separated (e.g. binpack,spread); --policy is always allowed; empty: pods run under --policy only")
	fs.StringVar(&o.FilterMode, "filter-mode", o.FilterMode, "which fitting nodes filter keeps: best (only the policy's best-scoring nodes) or all")
	fs.IntVar(&o.MaxBestNodes, "max-best-nodes", o.MaxBestNodes, "with --filter-mode=best, how many of the nodes tied for the best score filter keeps (a random sample); 0: all of them")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "informer resync period, 0 for none")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "requests per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "request burst to the API server")
	fs.DurationVar(&o.BindTimeout, "bind-timeout", o.BindTimeout, "longest a bind call takes, waiting for the API request budget included; keep it below kube-scheduler's extender httpTimeout")
	fs.StringVar(&o.CardLimitsConfigMap, "card-limits-configmap", o.CardLimitsConfigMap, "namespace/name of an existing ConfigMap to keep up to date with the largest card in the cluster, for the chart's admission policy; empty: off")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "certificate (PEM) the verbs' address serves HTTPS with; empty: plain HTTP")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA (PEM) whose client certificates the verbs' address requires (kube-scheduler's extender tlsConfig); needs --tls-cert-file")
	fs.StringVar(&o.RecordKeyDir, "record-key-dir", o.RecordKeyDir, "directory with the key ('current', optional 'previous') the extender signs assignment records with, shared with the device plugins; empty: records unsigned")
	fs.DurationVar(&o.RecordKeyInterval, "record-key-interval", o.RecordKeyInterval, "how often --record-key-dir is read again, so that a rotated key takes effect without a restart (0: every 5s)")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest request body accepted (413 above it); the default fits a pod and 5,000 node names (nodeCacheCapable: true)")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "unless GOGC is set, the Go garbage collector's target percentage (0: Go's default, 100)")
	fs.Float64Var(&o.GoMemoryLimitFraction, "go-memory-limit-fraction", o.GoMemoryLimitFraction, "unless GOMEMLIMIT is set, the Go runtime's soft memory limit as a fraction of the container's cgroup memory limit (0: none)")
	o.Names.AddFlags(fs)
	o.addAccessFlags(fs)
	cli.AddKlogFlags(fs)
	cli.BindEnv(fs, EnvName)
}

// NewCommand returns the gpushare-scheduler command: flags (AddFlags), each
// also set by its environment variable read through lookupEnv (os.LookupEnv
// in main; the command line wins), then Run until the command's context ends.
func NewCommand(lookupEnv func(string) (string, bool)) *cobra.Command {
	o := DefaultOptions()
	return newCommand(&o, lookupEnv, Run)
}

// newCommand is NewCommand with the options and what runs them injected.
func newCommand(o *Options, lookupEnv func(string) (string, bool), run func(context.Context, Options) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpushare-scheduler",
		Short: "The gpushare scheduler extender: filter, prioritize and bind for pods requesting GPU memory",
		Long: `gpushare-scheduler answers kube-scheduler's extender calls (filter, prioritize, bind) for pods that
request GPU memory (--resource-name, default ` + string(api.DefaultResourceName) + `) or whole cards
(--whole-resource-name, default ` + string(api.DefaultWholeResourceName) + `), placing each container on one
GPU card (docs/design.md). Its records and the inventories it reads are annotations under --domain
(default ` + api.DefaultDomain + `); every gpushare program of a cluster must be given the same three names.

Every flag can also be set by the environment variable named in its description (the command
line wins; a variable set to "" gives the flag the empty value).`,
		Args:          cli.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.ApplyEnv(cmd.Flags(), lookupEnv); err != nil {
				return err
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().WithName("gpushare-scheduler"))
			return run(ctx, *o)
		},
	}
	cmd.SetFlagErrorFunc(cli.FlagError)
	o.AddFlags(cmd.Flags())
	return cmd
}

// Validate checks the options, the one place their rules live (Run calls
// it); every message says what to change. Its errors are usage errors
// (cli.ErrUsage: exit status 2).
func (o *Options) Validate() error {
	var errs []error
	if _, err := o.Names.Names(); err != nil {
		errs = append(errs, err)
	}
	if _, err := allocator.Lookup(o.Policy); err != nil {
		errs = append(errs, fmt.Errorf("--policy: %w", err))
	}
	if _, err := o.allowedPolicies(); err != nil {
		errs = append(errs, err)
	}
	if _, err := server.ParseFilterMode(o.FilterMode); err != nil {
		errs = append(errs, fmt.Errorf("--filter-mode: %w", err))
	}
	if _, _, err := net.SplitHostPort(o.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w (want host:port, e.g. :39999)", o.ListenAddress, err))
	}
	if o.Parallelism < 0 {
		errs = append(errs, fmt.Errorf("--parallelism %d is negative (0 means one per CPU)", o.Parallelism))
	}
	if o.MaxBestNodes < 0 {
		errs = append(errs, fmt.Errorf("--max-best-nodes %d is negative (0 keeps every tied node)", o.MaxBestNodes))
	}
	if o.AdminListenAddress != "" {
		if _, _, err := net.SplitHostPort(o.AdminListenAddress); err != nil {
			errs = append(errs, fmt.Errorf("--admin-listen %q: %w (want host:port, e.g. :39998)", o.AdminListenAddress, err))
		}
	}
	if o.Kubeconfig != "" {
		if _, err := os.Stat(o.Kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d must be positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.BindTimeout <= time.Second {
		errs = append(errs, fmt.Errorf("--bind-timeout %v leaves no time to wait for the API request budget: give more than 1s, below kube-scheduler's extender httpTimeout", o.BindTimeout))
	}
	if o.CardLimitsConfigMap != "" {
		if _, _, err := o.cardLimitsRef(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.ResyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--resync-period %v is negative", o.ResyncPeriod))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together: set both (HTTPS) or neither (HTTP)"))
	}
	if o.ClientCAFile != "" && o.TLSCertFile == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file and --tls-private-key-file: client certificates are checked over HTTPS only"))
	}
	if o.RecordKeyDir != "" {
		if _, err := api.LoadRecordKeys(o.RecordKeyDir); err != nil {
			errs = append(errs, fmt.Errorf("--record-key-dir: %w", err))
		}
	}
	if o.GCPercent < 0 || o.GCPercent > 10000 {
		errs = append(errs, fmt.Errorf("--gc-percent %d is not between 0 (Go's default) and 10000; the default is %d", o.GCPercent, DefaultGCPercent))
	}
	if o.GoMemoryLimitFraction < 0 || o.GoMemoryLimitFraction > 1 {
		errs = append(errs, fmt.Errorf("--go-memory-limit-fraction %v is not between 0 (no limit) and 1; the default is 0.9", o.GoMemoryLimitFraction))
	}
	if o.MaxRequestBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("--max-request-bytes %d is below 64 KiB, too small for a pod; the default is %d", o.MaxRequestBytes, server.DefaultMaxBodyBytes))
	}
	errs = append(errs, o.validateAccess()...)
	return cli.Usage(errors.Join(errs...))
}

// allowedPolicies looks up AllowedPolicies; an unknown or empty name is an
// error naming the known ones.
func (o *Options) allowedPolicies() ([]*allocator.Policy, error) {
	var out []*allocator.Policy
	for _, name := range o.AllowedPolicies {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("--allowed-policies %q has an empty entry: list policy names separated by one comma, e.g. binpack,spread", strings.Join(o.AllowedPolicies, ","))
		}
		p, err := allocator.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("--allowed-policies: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// cardLimitsRef splits CardLimitsConfigMap into namespace and name.
func (o *Options) cardLimitsRef() (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(o.CardLimitsConfigMap, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--card-limits-configmap %q: want namespace/name, e.g. gpushare-system/%s", o.CardLimitsConfigMap, api.CardLimitsConfigMap)
	}
	return namespace, name, nil
}

// RestConfig loads the kubeconfig, or the in-cluster config when none is set.
func (o *Options) RestConfig() (*rest.Config, error) {
	if o.Kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (set --kubeconfig when running outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
	}
	return cfg, nil
}

// setMemoryLimit sets the Go runtime's soft memory limit to fraction of the
// cgroup's (GoMemoryLimitFraction) unless GOMEMLIMIT set one, says so, and
// returns the limit it set (0: none).
func setMemoryLimit(fraction float64, lookupEnv func(string) (string, bool), read memlimit.ReadFile) int64 {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok {
		klog.InfoS("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, err := memlimit.CgroupLimit(read)
	if err != nil {
		klog.ErrorS(err, "Reading the cgroup memory limit; no Go memory limit set (set GOMEMLIMIT to give one)")
		return 0
	}
	soft := memlimit.SoftLimit(limit, fraction)
	if soft > 0 {
		debug.SetMemoryLimit(soft)
		klog.InfoS("Go memory limit set", "bytes", soft, "cgroupLimit", limit, "fraction", fraction)
	}
	return soft
}

// setGCPercent sets the garbage collector's target to percent (GCPercent)
// unless GOGC set one or percent is 0, says so, and returns the target set
// (0: none).
func setGCPercent(percent int, lookupEnv func(string) (string, bool)) int {
	if v, ok := lookupEnv("GOGC"); ok {
		klog.InfoS("Go GC target from GOGC", "GOGC", v)
		return 0
	}
	if percent <= 0 {
		return 0
	}
	debug.SetGCPercent(percent)
	klog.InfoS("Go GC target set", "percent", percent)
	return percent
}

// Run validates the options, connects to the cluster and serves until ctx
// ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	setGCPercent(o.GCPercent, os.LookupEnv)
	setMemoryLimit(o.GoMemoryLimitFraction, os.LookupEnv, os.ReadFile)
	cfg, err := o.RestConfig()
	if err != nil {
		return err
	}
	cfg.UserAgent = "gpushare-scheduler"
	// One budget for every request: reads wait on it in client-go, Bindings
	// take their token in the bind verb, with its deadline (server.Config).
	budget := rate.NewLimiter(rate.Limit(o.KubeAPIQPS), o.KubeAPIBurst)
	cfg.RateLimiter = readLimiter{budget}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	bindCfg := rest.CopyConfig(cfg)
	bindCfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	bindClient, err := kubernetes.NewForConfig(bindCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ln, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var admin net.Listener
	if o.AdminListenAddress != "" {
		if admin, err = net.Listen("tcp", o.AdminListenAddress); err != nil {
			ln.Close()
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	auth, err := authClient(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	return Serve(ctx, o, Clients{Read: client, Bind: bindClient, Budget: budget, Auth: auth}, ln, admin)
}

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

func (l readLimiter) TryAccept() bool { return l.Allow() }
func (l readLimiter) Accept()         { _ = l.Limiter.Wait(context.Background()) }
func (l readLimiter) Stop()           {}
func (l readLimiter) QPS() float32    { return float32(l.Limit()) }
func (l readLimiter) Wait(ctx context.Context) error {
	return l.Limiter.Wait(ctx)
}

// Serve runs the extender on ln (every route) and, when admin is not nil, the
// read-only routes on admin, with injected clients until ctx ends: the HTTP
// servers answer at once (readyz turns ready after the informers sync).
func Serve(ctx context.Context, o Options, clients Clients, ln, admin net.Listener) error {
	logger := klog.FromContext(ctx)
	policy, err := allocator.Lookup(o.Policy)
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

	var keys api.RecordKeyring
	if o.RecordKeyDir != "" {
		ring, err := recordkey.Load(o.RecordKeyDir, logger.WithName("record-key"))
		if err != nil {
			return cli.Usage(fmt.Errorf("--record-key-dir: %w", err))
		}
		if err := ring.Register(reg); err != nil {
			return err
		}
		go ring.Run(ctx, nil, o.RecordKeyInterval)
		keys = ring
	}
	c := cache.New(cache.WithRecordKeys(keys), cache.WithNames(names))
	factory := informers.NewSharedInformerFactory(clients.Read, o.ResyncPeriod)
	pods, err := c.Attach(factory)
	if err != nil {
		return err
	}
	workers := o.Parallelism
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	srv, err := server.New(server.Config{Names: names, Cache: c, Client: clients.Read, BindClient: clients.Bind, WriteLimiter: clients.Budget, BindTimeout: o.BindTimeout, Pods: pods, Policy: policy, AllowedPolicies: allowed, FilterMode: mode, Registry: reg, Parallelism: workers, MaxBestNodes: o.MaxBestNodes, MaxBodyBytes: o.MaxRequestBytes, RecordKeys: keys})
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
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.CleanupExpired()
			}
		}
	}()

	servers := []*http.Server{httpSrv}
	listeners := []net.Listener{ln}
	if admin != nil {
		servers = append(servers, httpserve.New(ctx, guards.adminHandler(srv.ReadOnlyHandler(reg))))
		listeners = append(listeners, admin)
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func(hs *http.Server, l net.Listener) { errc <- hs.Serve(l) }(servers[i], listeners[i])
		logger.Info("Serving", "address", listeners[i].Addr().String(), "readOnly", i > 0, "https", i == 0 && tlsConfig != nil, "clientCertificates", i == 0 && o.ClientCAFile != "")
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

// serverTLS is the verbs' TLS configuration, nil for plain HTTP: the
// certificate and key, TLS 1.2 at least, and with ClientCAFile a client
// certificate signed by that CA required on every connection. The files are
// read again when they change (tlsFiles), so a certificate renewed in its
// mounted Secret (cert-manager renews before expiry) is served without a
// restart.
func (o *Options) serverTLS(log klog.Logger) (*tls.Config, error) {
	if o.TLSCertFile == "" {
		return nil, nil
	}
	f := &tlsFiles{cert: o.TLSCertFile, key: o.TLSPrivateKeyFile, ca: o.ClientCAFile, names: o.ClientCertNames, log: log, now: time.Now}
	cfg, raw, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cfg, f.raw, f.checked = cfg, raw, f.now()
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.get(), nil }}, nil
}

// tlsRecheck is how often, at most, a handshake looks whether the TLS files
// changed.
const tlsRecheck = 10 * time.Second

// tlsFiles is the verbs' TLS configuration from files, reloaded when they
// change; a changed set that does not load keeps the last good one (logged
// once per content).
type tlsFiles struct {
	cert, key, ca string
	names         []string // --client-cert-names
	log           klog.Logger
	now           func() time.Time

	mu      sync.Mutex
	raw     []byte // the files' content behind cfg (or the last bad one)
	checked time.Time
	cfg     *tls.Config
}

// get returns the configuration in force, after reading the files again if
// tlsRecheck has passed since the last look.
func (f *tlsFiles) get() *tls.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.checked) >= tlsRecheck {
		f.checked = now
		raw := f.read()
		if !bytes.Equal(raw, f.raw) {
			f.raw = raw
			if cfg, _, err := f.load(); err != nil {
				f.log.Error(err, "The extender's TLS files changed to something that does not load; serving the last good certificate")
			} else {
				f.cfg = cfg
				f.log.Info("TLS certificate reloaded", "certFile", f.cert)
			}
		}
	}
	return f.cfg
}

// read is the files' content, concatenated (an unreadable file counts as
// its error).
func (f *tlsFiles) read() []byte {
	var out []byte
	for _, name := range []string{f.cert, f.key, f.ca} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			b = []byte(err.Error())
		}
		out = fmt.Appendf(out, "%s %d\n", name, len(b))
		out = append(out, b...)
	}
	return out
}

// load builds the configuration from the files.
func (f *tlsFiles) load() (*tls.Config, []byte, error) {
	raw := f.read()
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--client-ca-file %s: no PEM certificate in it", f.ca)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		cfg.VerifyConnection = clientNameCheck(f.names)
	}
	return cfg, raw, nil
}
