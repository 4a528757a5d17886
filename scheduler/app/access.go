package app

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpushare/gpushare/internal/adminauth"
)

// Who may call what: the read-only routes that tell who holds which card
// (/inspect) and the metrics are guarded by delegated authentication and
// authorization (internal/adminauth); the verbs by the client certificate
// kube-scheduler presents (--client-ca-file) and, with --client-cert-names,
// by that certificate's name.

// authQPS and authBurst are the request budget of the guard's TokenReviews
// and SubjectAccessReviews, apart from the extender's own budget: a flood of
// new tokens at the admin port delays no Binding.
const (
	authQPS   = 20
	authBurst = 40
)

// probePaths are served to anyone: the kubelet's probes carry no token.
var probePaths = []string{"/healthz", "/readyz"}

// verbPaths are kube-scheduler's, guarded by the TLS client certificate.
var verbPaths = []string{"/filter", "/prioritize", "/bind", "/preempt"}

func (o *Options) validateAccess() []error {
	var errs []error
	if err := o.AdminAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(o.ClientCertNames) > 0 && o.ClientCAFile == "" {
		errs = append(errs, errors.New("clientCertNames needs --client-ca-file: names are checked on client certificates, which only a CA makes the verbs ask for"))
	}
	for _, n := range o.ClientCertNames {
		if strings.TrimSpace(n) == "" {
			errs = append(errs, fmt.Errorf("clientCertNames %q has an empty entry: list names separated by one comma", strings.Join(o.ClientCertNames, ",")))
			break
		}
	}
	return errs
}

// authClient is the guard's connection to the API server, with its own
// budget (authQPS).
func authClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.RateLimiter, c.QPS, c.Burst = nil, authQPS, authBurst
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for --admin-auth: %w", err)
	}
	return client, nil
}

// accessGuards wraps the extender's two handlers: every route on the admin
// address but the probes, and on the verbs' address the read-only routes
// unless it listens on loopback only (the chart's dedicated mode, where only
// the pod's own containers reach it).
type accessGuards struct{ admin, verbs *adminauth.Guard }

func newAccessGuards(o Options, clients Clients, verbsAddr net.Addr) (accessGuards, error) {
	client := cmp.Or(clients.Auth, clients.Read)
	admin, err := adminauth.New(o.AdminAuth, client, probePaths...)
	if err != nil {
		return accessGuards{}, err
	}
	verbsMode := o.AdminAuth
	if isLoopback(verbsAddr.String()) {
		verbsMode.Mode = adminauth.None
	}
	verbs, err := adminauth.New(verbsMode, client, append(slices.Clone(probePaths), verbPaths...)...)
	if err != nil {
		return accessGuards{}, err
	}
	return accessGuards{admin: admin, verbs: verbs}, nil
}

func (g accessGuards) adminHandler(h http.Handler) http.Handler { return g.admin.Wrap(h) }
func (g accessGuards) verbsHandler(h http.Handler) http.Handler { return g.verbs.Wrap(h) }

// isLoopback says whether addr (host:port) listens on a loopback address
// only ("localhost", 127.0.0.0/8, ::1); ":port" listens everywhere.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientNameCheck returns a tls.Config VerifyConnection that accepts a
// verified client certificate only when its CN, a DNS SAN or a URI SAN is
// one of names (nil when names is empty). With a CA that also signs other
// certificates (cert-manager's issuerRef), the CA alone would let any of
// them call /bind.
func clientNameCheck(names []string) func(tls.ConnectionState) error {
	if len(names) == 0 {
		return nil
	}
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		leaf := cs.PeerCertificates[0]
		if slices.ContainsFunc(certNames(leaf), func(n string) bool { return slices.Contains(names, n) }) {
			return nil
		}
		return fmt.Errorf("client certificate %q is not one the extender accepts (--client-cert-names %s): use kube-scheduler's certificate from the chart's <release>-extender-client Secret", leaf.Subject.CommonName, strings.Join(names, ","))
	}
}

// certNames are the names a certificate carries: its CN, DNS and URI SANs.
func certNames(c *x509.Certificate) []string {
	out := []string{c.Subject.CommonName}
	out = append(out, c.DNSNames...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}
