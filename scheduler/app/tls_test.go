package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by ca, for a server (with
// 127.0.0.1 as its address) or a client.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// In extender-only mode the verbs listen where other pods can reach them: with
// a client CA, only a caller holding a certificate from it (kube-scheduler,
// with the chart's stanza) completes the TLS handshake; the admin address
// stays plain HTTP for probes and Prometheus.
func TestVerbsRequireAClientCertificateFromTheCA(t *testing.T) {
	ca, other := newTestCA(t, "gpushare-extender-ca"), newTestCA(t, "someone-else")
	serverCert, serverKey := ca.issue(t, "gpushare-scheduler", true)
	clientCert, clientKey := ca.issue(t, "kube-scheduler", false)
	strangerCert, strangerKey := other.issue(t, "kube-scheduler", false)

	client := fake.NewClientset(fixture.MakeNode("n1").Card(0, 40).Obj())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.TLSCertFile, o.TLSPrivateKeyFile = writeTemp(t, "tls.crt", serverCert), writeTemp(t, "tls.key", serverKey)
	o.ClientCAFile = writeTemp(t, "ca.crt", ca.pem)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o, Clients{Read: client}, ln, admin) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	httpsClient := func(certPEM, keyPEM []byte) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	}
	url := "https://" + ln.Addr().String() + "/readyz"
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		resp, err := httpsClient(clientCert, clientKey).Get(url)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("kube-scheduler's certificate: %v (last: %v)", err, last)
	}

	for name, c := range map[string]*http.Client{
		"no client certificate":                  httpsClient(nil, nil),
		"a certificate from another CA":          httpsClient(strangerCert, strangerKey),
		"plain HTTP on the verbs' HTTPS address": {Timeout: 5 * time.Second},
	} {
		u := url
		if strings.HasPrefix(name, "plain") {
			u = "http://" + ln.Addr().String() + "/filter"
		}
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			if !strings.HasPrefix(name, "plain") || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %s, want the connection refused", name, resp.Status)
			}
			continue
		}
		t.Logf("%s: %v", name, err)
	}

	resp, err := http.Get("http://" + admin.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("admin address over HTTP: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin /healthz: %s", resp.Status)
	}
}

// The verbs' certificate is read again when its files change (a Secret
// renewed by cert-manager, swapped in by the kubelet), at most every
// tlsRecheck; files that no longer load keep the last good certificate.
func TestTLSCertificateReloadedWhenItsFilesChange(t *testing.T) {
	ca := newTestCA(t, "ca")
	dir := t.TempDir()
	write := func(cert, key []byte) {
		t.Helper()
		for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.pem} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	serial := func(cfg *tls.Config) string {
		t.Helper()
		leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	c1, k1 := ca.issue(t, "extender", true)
	write(c1, k1)
	now := time.Now()
	f := &tlsFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), ca: filepath.Join(dir, "ca.crt"), now: func() time.Time { return now }}
	cfg, raw, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	f.cfg, f.raw, f.checked = cfg, raw, now
	first := serial(f.get())
	if f.get().ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatal("the reloaded configuration does not require client certificates")
	}

	c2, k2 := ca.issue(t, "extender", true)
	write(c2, k2)
	if got := serial(f.get()); got != first {
		t.Errorf("reloaded before tlsRecheck passed")
	}
	now = now.Add(tlsRecheck)
	second := serial(f.get())
	if second == first {
		t.Fatal("the renewed certificate is not served after tlsRecheck")
	}

	write(c1, []byte("not a key"))
	now = now.Add(tlsRecheck)
	if got := serial(f.get()); got != second {
		t.Errorf("files that do not load replaced the last good certificate")
	}
}
