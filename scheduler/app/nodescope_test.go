package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/scheduler/nodescope"
)

// The webhook serves HTTPS with its own certificate and answers a review as
// the API server sends it.
func TestNodeScopeWebhookServesReviewsOverHTTPS(t *testing.T) {
	ca := newTestCA(t, "node-scope-ca")
	certPEM, keyPEM := ca.issue(t, "gpushare-scheduler", true)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:gpushare-system:gpushare-device-plugin"
	o := DefaultOptions()
	o.NodeScope = NodeScopeOptions{Listen: "127.0.0.1:0", Users: []string{user}, TLSCertFile: cert, TLSPrivateKeyFile: key}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, ln, err := nodeScopeServer(ctx, o, nil, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body, _ := json.Marshal(authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Extra: map[string]authorizationv1.ExtraValue{nodescope.NodeNameExtra: {"gpu-a"}},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}},
	})
	resp, err := client.Post("https://"+ln.Addr().String()+nodescope.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got authorizationv1.SubjectAccessReview
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !got.Status.Denied || got.Status.Allowed {
		t.Errorf("listing every pod as the plugin: %+v, want denied", got.Status)
	}
	if resp, err := http.Post("http://"+ln.Addr().String()+nodescope.Path, "application/json", bytes.NewReader(body)); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the webhook answered plain HTTP")
		}
	}
}
