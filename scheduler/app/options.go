package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/nodescope"
	"github.com/gpushare/gpushare/scheduler/server"
)

// Kind is the kind of the extender's configuration file (cli.LoadConfig).
const Kind = "SchedulerConfiguration"

// Options are the program's settings: the fields without a JSON name are its flags, set per run;
// the others are its configuration file (--config, kind Kind; docs/reference/scheduler-config.md
// is generated from these comments).
type Options struct {
	metav1.TypeMeta `json:",inline"`
	// ConfigFile is the configuration file (--config).
	ConfigFile string `json:"-"`
	// ListenAddress is where the HTTP server listens, e.g. ":39999".
	ListenAddress string `json:"-"`
	// AdminListenAddress, when set, is a second address serving only the
	// read-only routes (/healthz, /readyz, /metrics, /inspect), e.g. ":39998":
	// probes and Prometheus reach it while the verbs stay on ListenAddress
	// (127.0.0.1 in the chart's dedicated mode).
	AdminListenAddress string `json:"-"`
	// Parallelism is how many goroutines evaluate the nodes of one filter or
	// prioritize call; 0 means one per CPU the process may use (GOMAXPROCS).
	Parallelism int `json:"parallelism"`
	// Kubeconfig is a kubeconfig file; empty means in-cluster.
	Kubeconfig string `json:"-"`
	// Policy is the placement policy: frag (the best packer, docs/packing.md), binpack,
	// bestfit, fgd or spread.
	Policy string `json:"policy"`
	// AllowedPolicies are the policies a pod may name in its <domain>/policy annotation,
	// besides policy (always allowed). Empty: pods run under policy only, so that no tenant
	// changes how the cluster is packed unless the operator says so.
	AllowedPolicies []string `json:"allowedPolicies"`
	// FilterMode says which fitting nodes filter keeps: best (only the policy's best-scoring
	// nodes, so that kube-scheduler's own scores cannot overrule the policy) or all.
	FilterMode string `json:"filterMode"`
	// MaxBestNodes: with filterMode best, how many of the nodes tied for the best score filter
	// keeps (a random sample); 0: all of them.
	MaxBestNodes int `json:"maxBestNodes"`
	// ResyncPeriod is the informers' resync period (0: none).
	ResyncPeriod time.Duration `json:"resyncPeriod"`
	// KubeAPIQPS and KubeAPIBurst are the extender's API request budget, shared by its reads
	// and its writes (one Binding per pod): 200 binds/s sustained, a 2 s backlog at once.
	KubeAPIQPS   float64 `json:"kubeAPIQPS"`
	KubeAPIBurst int     `json:"kubeAPIBurst"`
	// BindTimeout bounds one bind call, waiting for the budget included;
	// it must stay below kube-scheduler's extender httpTimeout.
	BindTimeout time.Duration `json:"bindTimeout"`
	// CardLimitsConfigMap, "namespace/name", is the ConfigMap the extender
	// keeps up to date with the largest card in the cluster, for the
	// admission policy that refuses requests no card can hold (empty: off).
	// The ConfigMap must exist; the extender only updates it.
	CardLimitsConfigMap string `json:"cardLimitsConfigMap"`
	// DevicePluginSelector is a label selector of the device plugin's pods: no GPU pod is
	// placed on a node where they are all not Ready, being deleted or gone. Empty: off.
	DevicePluginSelector string `json:"devicePluginSelector"`
	// TLSCertFile and TLSPrivateKeyFile, when set, make the verbs' address
	// (ListenAddress) serve HTTPS; ClientCAFile, when also set, makes it
	// require a client certificate signed by that CA (kube-scheduler's
	// extender tlsConfig certFile/keyFile). The admin address stays HTTP.
	TLSCertFile       string `json:"-"`
	TLSPrivateKeyFile string `json:"-"`
	ClientCAFile      string `json:"-"`
	// MaxRequestBytes is the largest request body accepted (413 above it); the default fits a
	// pod and 5,000 node names.
	MaxRequestBytes int64 `json:"maxRequestBytes"`
	// GoMemoryLimitFraction, when above 0 and GOMEMLIMIT is not set, makes the Go runtime's
	// soft memory limit this fraction of the container's cgroup memory limit: the extender
	// collects before the container's limit rather than at it.
	GoMemoryLimitFraction float64 `json:"goMemoryLimitFraction"`
	// GCPercent, when above 0 and GOGC is not set, is the Go garbage collector's target: the
	// heap grows this many percent over the live heap before a collection. At 5,000 nodes Go's
	// own 100 collects often enough to double a filter call's p99 (docs/design.md). 0 leaves
	// Go's default.
	GCPercent int `json:"gcPercent"`
	// RecordKeyDir, when set, is a directory (a mounted Secret) with the
	// Ed25519 private key the extender signs every record with
	// (api.LoadRecordKeys).
	RecordKeyDir string `json:"-"`
	// RecordKeyInterval is how often --record-key-dir is read again, so that a rotated
	// Secret takes effect without a restart (0: every 5s).
	RecordKeyInterval time.Duration `json:"recordKeyInterval"`
	// RecordPublicKeyConfigMap, "namespace/name", is the existing ConfigMap the extender
	// publishes its keys' public halves in, for the device plugins; it binds nothing before
	// it has published them. Empty: not published.
	RecordPublicKeyConfigMap string `json:"recordPublicKeyConfigMap"`
	// Names are the resource names and the annotation domain, the same in every program.
	Names cli.NameFlags `json:"names"`
	// AdminAuth guards /inspect and /metrics on --admin-listen (and on --listen unless it is
	// a loopback address).
	AdminAuth adminauth.Options `json:"adminAuth"`
	// ClientCertNames, with --client-ca-file, are the names (certificate CN, DNS or URI SAN) a
	// client certificate must carry to call the verbs; empty: any certificate the CA signed.
	ClientCertNames []string `json:"clientCertNames"`
	// NodeScope is the authorization webhook for the device plugin's reads (nodescope.go).
	NodeScope NodeScopeOptions `json:"nodeScope"`
	// DRA makes the extender read the gpushare DRA driver's ResourceSlices and the
	// ResourceClaims, which its ClusterRole must allow (the chart's does with dra.enabled):
	// /inspect shows the claims, and /dra/prioritize scores nodes for pods with claims.
	DRA bool `json:"dra"`
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

// DefaultGCPercent is gcPercent's default, the chart's gcPercent.
const DefaultGCPercent = 400

// envPrefix prefixes the environment variable of every flag:
// --filter-mode is GPUSHARE_FILTER_MODE.
const envPrefix = "GPUSHARE_"

// EnvName is the environment variable that sets the named flag.
func EnvName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// deprecatedFlags set configuration fields (cli.Aliases).
var deprecatedFlags = []cli.Alias{
	{Flag: cli.FlagDomain, Field: "names.domain"}, {Flag: cli.FlagResourceName, Field: "names.resourceName"},
	{Flag: cli.FlagWholeResourceName, Field: "names.wholeResourceName"},
	{Flag: "parallelism", Field: "parallelism"}, {Flag: "policy", Field: "policy"}, {Flag: "allowed-policies", Field: "allowedPolicies"},
	{Flag: "filter-mode", Field: "filterMode"}, {Flag: "max-best-nodes", Field: "maxBestNodes"}, {Flag: "resync-period", Field: "resyncPeriod"},
	{Flag: "kube-api-qps", Field: "kubeAPIQPS"}, {Flag: "kube-api-burst", Field: "kubeAPIBurst"}, {Flag: "bind-timeout", Field: "bindTimeout"},
	{Flag: "card-limits-configmap", Field: "cardLimitsConfigMap"}, {Flag: "device-plugin-selector", Field: "devicePluginSelector"},
	{Flag: "record-public-key-configmap", Field: "recordPublicKeyConfigMap"}, {Flag: "record-key-interval", Field: "recordKeyInterval"},
	{Flag: "max-request-bytes", Field: "maxRequestBytes"}, {Flag: "gc-percent", Field: "gcPercent"}, {Flag: "dra", Field: "dra"},
	{Flag: "go-memory-limit-fraction", Field: "goMemoryLimitFraction"}, {Flag: "admin-auth", Field: "adminAuth.mode"},
	{Flag: "admin-token-file", Field: "adminAuth.tokenFile"}, {Flag: "client-cert-names", Field: "clientCertNames"},
	{Flag: "node-scoped-users", Field: "nodeScope.users"},
}

// AddFlags defines the per-run flags on fs with o's values as defaults, the deprecated flags of
// configuration fields and klog's flags (-v, …), each bound to its environment variable
// (EnvName: GPUSHARE_LISTEN, GPUSHARE_V, …).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, cli.FlagConfig, o.ConfigFile, "configuration file, kind "+Kind+" (docs/reference/scheduler-config.md); empty: the defaults")
	fs.StringVar(&o.ListenAddress, "listen", o.ListenAddress, "address the extender's HTTP server listens on")
	fs.StringVar(&o.AdminListenAddress, "admin-listen", o.AdminListenAddress, "optional second address serving only /healthz, /readyz, /metrics and /inspect")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "certificate (PEM) the verbs' address serves HTTPS with; empty: plain HTTP")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA (PEM) whose client certificates the verbs' address requires (kube-scheduler's extender tlsConfig); needs --tls-cert-file")
	fs.StringVar(&o.RecordKeyDir, "record-key-dir", o.RecordKeyDir, "directory with the Ed25519 private keys ('current', optional 'previous'; PKCS#8 PEM) the extender signs assignment records with; empty: records unsigned")
	fs.StringVar(&o.NodeScope.Listen, "node-scope-listen", o.NodeScope.Listen, "address of the authorization webhook (POST "+nodescope.Path+", HTTPS) that lets nodeScope.users read only their own node's pods and Node (docs/security.md); empty: off")
	fs.StringVar(&o.NodeScope.TLSCertFile, "node-scope-tls-cert-file", o.NodeScope.TLSCertFile, "certificate (PEM) --node-scope-listen serves; required with it")
	fs.StringVar(&o.NodeScope.TLSPrivateKeyFile, "node-scope-tls-private-key-file", o.NodeScope.TLSPrivateKeyFile, "private key (PEM) of --node-scope-tls-cert-file")
	cli.Aliases(fs, o, deprecatedFlags)
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
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	if _, err := o.allowedPolicies(); err != nil {
		errs = append(errs, err)
	}
	if _, err := server.ParseFilterMode(o.FilterMode); err != nil {
		errs = append(errs, fmt.Errorf("filterMode: %w", err))
	}
	if _, _, err := net.SplitHostPort(o.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w (want host:port, e.g. :39999)", o.ListenAddress, err))
	}
	if o.Parallelism < 0 {
		errs = append(errs, fmt.Errorf("parallelism %d is negative (0 means one per CPU)", o.Parallelism))
	}
	if o.MaxBestNodes < 0 {
		errs = append(errs, fmt.Errorf("maxBestNodes %d is negative (0 keeps every tied node)", o.MaxBestNodes))
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
		errs = append(errs, fmt.Errorf("kubeAPIQPS %v and kubeAPIBurst %d must be positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.BindTimeout <= time.Second {
		errs = append(errs, fmt.Errorf("bindTimeout %v leaves no time to wait for the API request budget: give more than 1s, below kube-scheduler's extender httpTimeout", o.BindTimeout))
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
		errs = append(errs, fmt.Errorf("resyncPeriod %v is negative", o.ResyncPeriod))
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
		if _, _, err := configMapRef("recordPublicKeyConfigMap", o.RecordPublicKeyConfigMap); err != nil {
			errs = append(errs, err)
		} else if o.RecordKeyDir == "" {
			errs = append(errs, errors.New("recordPublicKeyConfigMap needs --record-key-dir: without keys there is nothing to publish"))
		}
	}
	if o.GCPercent < 0 || o.GCPercent > 10000 {
		errs = append(errs, fmt.Errorf("gcPercent %d is not between 0 (Go's default) and 10000; the default is %d", o.GCPercent, DefaultGCPercent))
	}
	if o.GoMemoryLimitFraction < 0 || o.GoMemoryLimitFraction > 1 {
		errs = append(errs, fmt.Errorf("goMemoryLimitFraction %v is not between 0 (no limit) and 1; the default is 0.9", o.GoMemoryLimitFraction))
	}
	if o.MaxRequestBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("maxRequestBytes %d is below 64 KiB, too small for a pod; the default is %d", o.MaxRequestBytes, server.DefaultMaxBodyBytes))
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
			return nil, fmt.Errorf("allowedPolicies %q has an empty entry: list policy names separated by one comma, e.g. binpack,spread", strings.Join(o.AllowedPolicies, ","))
		}
		p, err := registry.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("allowedPolicies: %w", err)
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
		return nil, fmt.Errorf("devicePluginSelector %q: %w (want a label selector, e.g. app.kubernetes.io/component=device-plugin)", o.DevicePluginSelector, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("devicePluginSelector %q selects every pod: name the device plugin's labels, e.g. app.kubernetes.io/component=device-plugin", o.DevicePluginSelector)
	}
	return sel, nil
}

// cardLimitsRef splits CardLimitsConfigMap into namespace and name.
func (o *Options) cardLimitsRef() (namespace, name string, err error) {
	return configMapRef("cardLimitsConfigMap", o.CardLimitsConfigMap)
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
