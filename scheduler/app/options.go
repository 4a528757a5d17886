package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
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
	// Policy names the allocator policy (registry.Names()).
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
	// DevicePluginSelector is a label selector for the device plugin's
	// pods (the chart's DaemonSet): no GPU pod is placed on a node whose
	// plugin pods are all not serving (cache.WithDevicePluginSelector).
	// Empty: off.
	DevicePluginSelector string
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
	// Ed25519 private key the extender signs every record with
	// (api.LoadRecordKeys), read
	// again every RecordKeyInterval (a rotated Secret takes effect without a
	// restart; internal/recordkey; 0: recordkey.DefaultInterval).
	RecordKeyDir      string
	RecordKeyInterval time.Duration
	// RecordPublicKeyConfigMap, "namespace/name", is the existing ConfigMap
	// the extender publishes its keys' public halves in, for the device
	// plugins (recordkey.Publisher); empty: not published.
	RecordPublicKeyConfigMap string
	// Names are the resource names and the annotation domain (--domain,
	// --resource-name, --whole-resource-name), the same in every program.
	Names cli.NameFlags
	// AdminAuth guards /inspect and /metrics (access.go, --admin-auth).
	AdminAuth adminauth.Options
	// ClientCertNames, with ClientCAFile, are the names a client
	// certificate must carry to call the verbs (--client-cert-names).
	ClientCertNames []string
	// NodeScope is the authorization webhook for the device plugin's reads
	// (nodescope.go).
	NodeScope NodeScopeOptions
	// DRA makes the extender read the gpushare DRA driver's ResourceSlices
	// and the ResourceClaims (cache.DRA), which its ClusterRole must allow
	// (the chart's does with dra.enabled): /inspect shows the claims beside
	// the device plugin's pods, and the DRA prioritize verb scores nodes for
	// pods with claims.
	DRA bool
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
		Policy:        registry.Default,
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
	fs.StringVar(&o.Policy, "policy", o.Policy, "placement policy, one of "+strings.Join(registry.Names(), ", "))
	fs.StringSliceVar(&o.AllowedPolicies, "allowed-policies", o.AllowedPolicies, "policies a pod may name in its <domain>/policy annotation (--domain), comma-separated (e.g. binpack,spread); --policy is always allowed; empty: pods run under --policy only")
	fs.StringVar(&o.FilterMode, "filter-mode", o.FilterMode, "which fitting nodes filter keeps: best (only the policy's best-scoring nodes) or all")
	fs.IntVar(&o.MaxBestNodes, "max-best-nodes", o.MaxBestNodes, "with --filter-mode=best, how many of the nodes tied for the best score filter keeps (a random sample); 0: all of them")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "informer resync period, 0 for none")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "requests per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "request burst to the API server")
	fs.DurationVar(&o.BindTimeout, "bind-timeout", o.BindTimeout, "longest a bind call takes, waiting for the API request budget included; keep it below kube-scheduler's extender httpTimeout")
	fs.StringVar(&o.CardLimitsConfigMap, "card-limits-configmap", o.CardLimitsConfigMap, "namespace/name of an existing ConfigMap to keep up to date with the largest card in the cluster, for the chart's admission policy; empty: off")
	fs.StringVar(&o.DevicePluginSelector, "device-plugin-selector", o.DevicePluginSelector, "label selector of the device plugin's pods (e.g. app.kubernetes.io/component=device-plugin,app.kubernetes.io/instance=gpushare): no GPU pod is placed on a node where they are all not Ready, being deleted or gone, since the kubelet fails GPU pods there until a plugin registers; empty: off")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "certificate (PEM) the verbs' address serves HTTPS with; empty: plain HTTP")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA (PEM) whose client certificates the verbs' address requires (kube-scheduler's extender tlsConfig); needs --tls-cert-file")
	fs.StringVar(&o.RecordKeyDir, "record-key-dir", o.RecordKeyDir, "directory with the Ed25519 private keys ('current', optional 'previous'; PKCS#8 PEM) the extender signs assignment records with, which only the extender holds; empty: records unsigned")
	fs.StringVar(&o.RecordPublicKeyConfigMap, "record-public-key-configmap", o.RecordPublicKeyConfigMap, "namespace/name of an existing ConfigMap the extender publishes the public halves of --record-key-dir in, for the device plugins; the extender binds nothing before it has published them; empty: off")
	fs.DurationVar(&o.RecordKeyInterval, "record-key-interval", o.RecordKeyInterval, "how often --record-key-dir is read again, so that a rotated key takes effect without a restart (0: every 5s)")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest request body accepted (413 above it); the default fits a pod and 5,000 node names (nodeCacheCapable: true)")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "unless GOGC is set, the Go garbage collector's target percentage (0: Go's default, 100)")
	fs.BoolVar(&o.DRA, "dra", o.DRA, "read the gpushare DRA driver's ResourceSlices and the ResourceClaims (--domain's driver; needs list and watch on them in resource.k8s.io): /inspect shows the DRA nodes and claims on their cards, and /dra/prioritize scores nodes for pods with claims (docs/dra.md)")
	fs.Float64Var(&o.GoMemoryLimitFraction, "go-memory-limit-fraction", o.GoMemoryLimitFraction, "unless GOMEMLIMIT is set, the Go runtime's soft memory limit as a fraction of the container's cgroup memory limit (0: none)")
	o.Names.AddFlags(fs)
	o.addAccessFlags(fs)
	o.addNodeScopeFlags(fs)
	cli.AddKlogFlags(fs)
	cli.BindEnv(fs, EnvName)
}

// Validate checks the options, the one place their rules live (Run calls
// it); every message says what to change. Its errors are usage errors
// (cli.ErrUsage: exit status 2).
func (o *Options) Validate() error {
	var errs []error
	if _, err := o.Names.Names(); err != nil {
		errs = append(errs, err)
	}
	if _, err := registry.Lookup(o.Policy); err != nil {
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
	if _, err := o.pluginSelector(); err != nil {
		errs = append(errs, err)
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
		if k, err := api.LoadRecordKeys(o.RecordKeyDir); err != nil {
			errs = append(errs, fmt.Errorf("--record-key-dir: %w", err))
		} else if k.Signer == nil {
			errs = append(errs, fmt.Errorf("--record-key-dir %s holds a public key: the extender needs the private key (the record-key Secret); public keys are for the device plugins", o.RecordKeyDir))
		}
	}
	if o.RecordPublicKeyConfigMap != "" {
		if _, _, err := configMapRef("--record-public-key-configmap", o.RecordPublicKeyConfigMap); err != nil {
			errs = append(errs, err)
		} else if o.RecordKeyDir == "" {
			errs = append(errs, errors.New("--record-public-key-configmap needs --record-key-dir: without keys there is nothing to publish"))
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
	errs = append(errs, o.validateNodeScope()...)
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
		p, err := registry.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("--allowed-policies: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// pluginSelector parses DevicePluginSelector; nil when it is empty.
func (o *Options) pluginSelector() (labels.Selector, error) {
	if o.DevicePluginSelector == "" {
		return nil, nil
	}
	sel, err := labels.Parse(o.DevicePluginSelector)
	if err != nil {
		return nil, fmt.Errorf("--device-plugin-selector %q: %w (want a label selector, e.g. app.kubernetes.io/component=device-plugin)", o.DevicePluginSelector, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("--device-plugin-selector %q selects every pod: name the device plugin's labels, e.g. app.kubernetes.io/component=device-plugin", o.DevicePluginSelector)
	}
	return sel, nil
}

// cardLimitsRef splits CardLimitsConfigMap into namespace and name.
func (o *Options) cardLimitsRef() (namespace, name string, err error) {
	return configMapRef("--card-limits-configmap", o.CardLimitsConfigMap)
}

// configMapRef splits a flag's "namespace/name" value.
func configMapRef(flag, ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s %q: want namespace/name, e.g. gpushare-system/%s", flag, ref, api.CardLimitsConfigMap)
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
