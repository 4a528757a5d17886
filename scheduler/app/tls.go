package app

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

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
	flags         string   // the flags naming cert and key, for errors (default the verbs')
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
		flags := f.flags
		flags = cmp.Or(flags, "--tls-cert-file/--tls-private-key-file")
		return nil, nil, fmt.Errorf("%s: %w", flags, err)
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
