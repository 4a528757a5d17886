package app

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

// With a CA that signs other certificates too (cert-manager's issuerRef),
// --client-cert-names keeps every one but kube-scheduler's from the verbs.
func TestClientNameCheck(t *testing.T) {
	check := clientNameCheck([]string{"gpushare-kube-scheduler", "spiffe://cluster/ns/kube-system/sa/kube-scheduler"})
	state := func(c *x509.Certificate) tls.ConnectionState {
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
	}
	spiffe, _ := url.Parse("spiffe://cluster/ns/kube-system/sa/kube-scheduler")
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		ok   bool
	}{
		{"kube-scheduler's CN is accepted", &x509.Certificate{Subject: pkix.Name{CommonName: "gpushare-kube-scheduler"}}, true},
		{"a URI SAN is accepted", &x509.Certificate{Subject: pkix.Name{CommonName: "x"}, URIs: []*url.URL{spiffe}}, true},
		{"another certificate of the same CA is refused", &x509.Certificate{Subject: pkix.Name{CommonName: "web-frontend"}, DNSNames: []string{"web.example.com"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(state(tc.cert))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "--client-cert-names") {
				t.Errorf("the refusal does not say which names are accepted: %v", err)
			}
		})
	}
	if clientNameCheck(nil) != nil {
		t.Error("no names: any certificate of the CA, no check")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:39999": true, "[::1]:1": true, "localhost:1": true, ":39999": false, "0.0.0.0:1": false, "10.0.0.1:1": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
