package inspect

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/cli"
)

// Output formats accepted by -o.
const (
	OutputTable = ""
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// defaultInterval is how often --watch prints the view again.
const defaultInterval = 2 * time.Second

// defaultRequestTimeout bounds each API request when --request-timeout is not
// given, so that an unreachable API server fails in seconds instead of
// hanging.
const defaultRequestTimeout = 30 * time.Second

// Exit codes returned by ExitCode: the three programs' statuses
// (internal/cli).
const (
	ExitOK = cli.ExitOK
	// ExitError: the view could not be produced (unknown node, unreachable
	// cluster, no kubeconfig, API error).
	ExitError = cli.ExitError
	// ExitUsage: bad flags or arguments.
	ExitUsage = cli.ExitUsage
)

// ErrUsage is wrapped by errors about flags and arguments (cli.ErrUsage).
var ErrUsage = cli.ErrUsage

func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

// Options are the inputs of one `kubectl inspect gpushare` run.
type Options struct {
	// ConfigFlags are kubectl's connection flags (--kubeconfig, --context,
	// --server, --request-timeout, ...).
	ConfigFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	// Details selects the per-card view (-d).
	Details bool
	// Output is "", "json" or "yaml" (-o).
	Output string
	// NodeName restricts the view to one node (the optional argument).
	NodeName string
	// FromExtender, when set, is the base URL of the gpushare scheduler
	// extender: the view is its GET /inspect instead of the API server's
	// nodes and pods (--from-extender).
	FromExtender string
	// Pending selects the view of GPU pods waiting for a node
	// (`kubectl inspect gpushare pending`).
	Pending bool
	// Health selects the health verdict (`kubectl inspect gpushare health`) and
	// ReleaseNamespace is where it looks for the chart's workloads.
	Health           bool
	ReleaseNamespace string
	// Namespace, when set, lists only that namespace's pods (-n).
	Namespace string
	// Selector is a label selector (-l): on nodes in the node views, on pods
	// in the pending view.
	Selector string
	// Names are the resource names and the annotation domain the cluster's
	// gpushare runs with (--domain, --resource-name, --whole-resource-name).
	Names cli.NameFlags
	// Model keeps only the cards of a matching model (--model; the matching
	// of the card-models pod annotation).
	Model string
	// Watch prints the view again every Interval until interrupted (-w).
	Watch    bool
	Interval time.Duration
	// Clock paces --watch; NewOptions sets the real one.
	Clock clock.WithTicker

	// selector and model are Selector and Model parsed by Validate.
	selector labels.Selector
	model    *api.ModelPattern

	// Client is the API client. Run builds it from ConfigFlags unless it is
	// already set (tests inject a fake clientset).
	Client kubernetes.Interface

	// HTTPClient talks to the extender with --from-extender. Complete sets
	// one with the request timeout unless it is already set.
	HTTPClient *http.Client

	// server is the API server's address, for error messages.
	server string
}

// NewOptions returns Options writing to streams, with kubectl's default
// connection flags.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	flags := genericclioptions.NewConfigFlags(true)
	flags.Namespace = nil // the view spans every namespace: no -n flag
	return &Options{ConfigFlags: flags, IOStreams: streams, Interval: defaultInterval, Clock: clock.RealClock{}, Names: cli.DefaultNameFlags()}
}

// Complete takes the node argument and, for --from-extender, makes the HTTP
// client. The Kubernetes client is made by Run (unless already set), so that
// a flag mistake is reported before a missing kubeconfig.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usagef("at most one NODE argument, got %d: %s", len(args), strings.Join(args, " "))
	}
	if len(args) == 1 {
		o.NodeName = args[0]
	}
	if o.FromExtender != "" && o.HTTPClient == nil {
		timeout, err := o.requestTimeout()
		if err != nil {
			return err
		}
		o.HTTPClient = &http.Client{Timeout: timeout, Transport: bearer{token: o.extenderToken(), next: http.DefaultTransport}}
	}
	return nil
}

// extenderToken is the bearer token sent to the extender's /inspect, which
// answers only an identity allowed to read it (the chart's
// <release>-inspect-reader): kubectl's --token, or the kubeconfig's token
// ("" when it has none, e.g. a client certificate: the extender's 401 says
// what to send).
func (o *Options) extenderToken() string {
	if o.ConfigFlags == nil {
		return ""
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return ""
	}
	if cfg.BearerToken == "" && cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(cfg.BearerTokenFile); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return cfg.BearerToken
}

// bearer adds a bearer token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// kubeClient returns o.Client, building it from ConfigFlags the first time.
func (o *Options) kubeClient() (kubernetes.Interface, error) {
	if o.Client != nil {
		return o.Client, nil
	}
	if err := o.checkConfigExists(); err != nil {
		return nil, err
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errNoConfig
		}
		return nil, fmt.Errorf("cannot load the Kubernetes configuration: %w", err)
	}
	o.server = cfg.Host
	cfg.Timeout = cmp.Or(cfg.Timeout, defaultRequestTimeout)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create a Kubernetes client for %s: %w", cfg.Host, err)
	}
	o.Client = client
	return client, nil
}

// requestTimeout is --request-timeout, or defaultRequestTimeout when it is
// not set ("0").
func (o *Options) requestTimeout() (time.Duration, error) {
	if o.ConfigFlags.Timeout == nil || *o.ConfigFlags.Timeout == "" || *o.ConfigFlags.Timeout == "0" {
		return defaultRequestTimeout, nil
	}
	d, err := time.ParseDuration(*o.ConfigFlags.Timeout)
	if err != nil || d < 0 {
		return 0, usagef("--request-timeout %q: want a duration such as 10s", *o.ConfigFlags.Timeout)
	}
	return d, nil
}

// errNoConfig says how to give the plugin a cluster.
var errNoConfig = errors.New("no Kubernetes configuration found: pass --kubeconfig or --server, set KUBECONFIG, or create ~/.kube/config")

// checkConfigExists fails when nothing names a cluster: no kubeconfig with a
// cluster, no --server, and not running in a pod. client-go would otherwise
// fall back to http://localhost:8080 and report a refused connection there.
func (o *Options) checkConfigExists() error {
	if f := o.ConfigFlags.APIServer; f != nil && *f != "" {
		return nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil // in-cluster configuration
	}
	raw, err := o.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return fmt.Errorf("cannot load the Kubernetes configuration: %w", err)
	}
	if len(raw.Clusters) == 0 {
		return errNoConfig
	}
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	switch o.Output {
	case OutputTable, OutputJSON, OutputYAML:
	default:
		return usagef("unknown output format %q: use -o json or -o yaml, or leave -o out for a table", o.Output)
	}
	if o.Details && o.Output != OutputTable {
		return usagef("-d/--details is a table view; -o %s already contains every detail", o.Output)
	}
	if _, err := o.Names.Names(); err != nil {
		return err
	}
	if o.Pending && (o.Details || o.FromExtender != "") {
		return usagef("pending reads the waiting pods from the API server: it takes no -d and no --from-extender")
	}
	if o.Watch && o.Interval <= 0 {
		return usagef("--interval %s: want a positive duration such as 2s", o.Interval)
	}
	if o.Selector != "" {
		if o.FromExtender != "" {
			return usagef("-l/--selector matches labels, which the extender does not send: leave out --from-extender")
		}
		sel, err := labels.Parse(o.Selector)
		if err != nil {
			return usagef("-l %q: %v", o.Selector, err)
		}
		o.selector = sel
	}
	if o.Model != "" {
		m, err := api.ParseModelPattern(o.Model)
		if err != nil {
			return usagef("--model: %v", err)
		}
		o.model = &m
	}
	if o.FromExtender != "" {
		u, err := url.Parse(o.FromExtender)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--from-extender %q: want the extender's base URL, e.g. http://localhost:39998", o.FromExtender)
		}
		if o.HTTPClient == nil {
			return errors.New("no HTTP client (Complete was not called)")
		}
	}
	return nil
}
