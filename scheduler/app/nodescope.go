package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/internal/httpserve"
	"github.com/gpushare/gpushare/scheduler/nodescope"
)

// NodeScopeOptions configure the authorization webhook that confines the
// device plugin's reads to its own node (scheduler/nodescope): the API
// server asks it about the scoped users' requests when its authorization
// configuration names it (docs/security.md).
type NodeScopeOptions struct {
	// Listen is the webhook's address (HTTPS); empty: off.
	Listen string `json:"-"`
	// Users are the usernames confined to the node their token is bound to, with
	// --node-scope-listen (the device plugin's service account user,
	// system:serviceaccount:NAMESPACE:NAME).
	Users []string `json:"users"`
	// TLSCertFile and TLSPrivateKeyFile are the certificate the webhook
	// serves, reloaded when they change; the API server checks it against
	// the certificate-authority of the webhook's kubeconfig.
	TLSCertFile       string `json:"-"`
	TLSPrivateKeyFile string `json:"-"`
}

func (o *Options) validateNodeScope() []error {
	n := o.NodeScope
	if n.Listen == "" {
		if len(n.Users) > 0 || n.TLSCertFile != "" || n.TLSPrivateKeyFile != "" {
			return []error{errors.New("nodeScope.users and --node-scope-tls-* need --node-scope-listen: set the webhook's address, or drop them")}
		}
		return nil
	}
	var errs []error
	if _, _, err := net.SplitHostPort(n.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--node-scope-listen %q: %w (want host:port, e.g. :39997)", n.Listen, err))
	}
	if len(n.Users) == 0 {
		errs = append(errs, errors.New("--node-scope-listen needs nodeScope.users: name the device plugin's service account user (system:serviceaccount:NAMESPACE:NAME)"))
	}
	for _, u := range n.Users {
		if strings.TrimSpace(u) == "" || strings.HasPrefix(u, "system:serviceaccount:") && strings.Count(u, ":") != 3 {
			errs = append(errs, fmt.Errorf("nodeScope.users entry %q is not a username (e.g. system:serviceaccount:gpushare-system:gpushare-device-plugin)", u))
		}
	}
	if n.TLSCertFile == "" || n.TLSPrivateKeyFile == "" {
		errs = append(errs, errors.New("--node-scope-listen needs --node-scope-tls-cert-file and --node-scope-tls-private-key-file: the API server calls authorization webhooks over HTTPS"))
	}
	return errs
}

// nodeScopeServer is the webhook's server and listener; nil, nil when
// --node-scope-listen is empty.
func nodeScopeServer(ctx context.Context, o Options, reg prometheus.Registerer, log klog.Logger) (*http.Server, net.Listener, error) {
	n := o.NodeScope
	if n.Listen == "" {
		return nil, nil, nil
	}
	f := &tlsFiles{cert: n.TLSCertFile, key: n.TLSPrivateKeyFile, flags: "--node-scope-tls-cert-file/--node-scope-tls-private-key-file", log: log, now: time.Now}
	cfg, raw, err := f.load()
	if err != nil {
		return nil, nil, err
	}
	f.cfg, f.raw, f.checked = cfg, raw, f.now()
	ln, err := net.Listen("tcp", n.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--node-scope-listen: %w", err)
	}
	ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.get(), nil }})
	users := nodescope.Users{}
	for _, u := range n.Users {
		users[u] = true
	}
	return httpserve.New(ctx, nodescope.Handler(users, reg, log.WithName("node-scope"))), ln, nil
}
