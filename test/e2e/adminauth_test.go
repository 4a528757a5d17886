package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// The extender's /inspect (which pod holds which card) and /metrics answer
// only a token the API server accepts of an identity the chart's reader
// ClusterRoles grant (--admin-auth=delegated); the device plugin's /metrics
// only the chart's scrape token (--admin-auth=token, as the chart runs it),
// and a flood of forged tokens there costs the API server no TokenReview.
// A tenant in the cluster (a pod's service account, or no token at all)
// learns nothing. The roles and bindings are the chart's
// (templates/admin-auth.yaml, helm template), whose auth-delegator binding
// holds the extender's service account only.
func TestAdminEndpointsRequireAuthorization(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	system := testNamespace(ctx, t, c, "gpushare-system")
	tenants := testNamespace(ctx, t, c, "tenant")
	for _, sa := range []struct{ ns, name string }{{system, "prometheus"}, {system, "operator"}, {tenants, "default-sa"}} {
		if _, err := c.Client.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The tenant's service account may do everything in its namespace.
	grantSA(ctx, t, c, tenants, "default-sa", "ClusterRole", "edit")
	out := renderChart(ctx, t, system, "templates/admin-auth.yaml",
		"--set", "adminAuth.metricsReaders[0].kind=ServiceAccount", "--set", "adminAuth.metricsReaders[0].name=prometheus", "--set", "adminAuth.metricsReaders[0].namespace="+system,
		"--set", "adminAuth.inspectReaders[0].kind=ServiceAccount", "--set", "adminAuth.inspectReaders[0].name=operator", "--set", "adminAuth.inspectReaders[0].namespace="+system)
	if strings.Contains(string(out), "{kind: ServiceAccount, name: gpushare-device-plugin,") {
		t.Errorf("the chart binds the device plugin's service account to system:auth-delegator: every GPU node could review tokens and ask what any identity may do\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "admin-auth.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the chart's admin-auth.yaml: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file) })
	token := func(ns, sa string) string {
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, operator, tenant := token(system, "prometheus"), token(system, "operator"), token(tenants, "default-sa")

	// The extender, with an admin address as the chart runs it.
	port, adminPort := freePort(t), freePort(t)
	p, err := cluster.StartProcess("gpushare-scheduler-adminauth", filepath.Join(c.StateDir(), "logs", "gpushare-scheduler-adminauth.log"), extenderBin,
		"--kubeconfig", c.Kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	if err := p.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", adminPort), time.Minute); err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)

	// A GPU node whose plugin serves its metrics, behind the scrape token.
	scrape := strings.Repeat("0123456789abcdef", 3)
	tokenFile := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(tokenFile, []byte(scrape), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsPort := freePort(t)
	node, err := c.StartNode(cluster.NodeOptions{
		Name: "adminauth-node", AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
		Labels: api.LabelEnabled + "=true", PluginBinary: pluginBinary(t),
		PluginArgs: []string{"--nvml=spec:1x40GiB:NVIDIA-A100", fmt.Sprintf("--metrics-address=127.0.0.1:%d", metricsPort), "--admin-auth=token", "--admin-token-file=" + tokenFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = node.Stop()
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), "adminauth-node", metav1.DeleteOptions{})
	})
	waitInventory(ctx, t, c, node)
	plugin := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)

	for _, tc := range []struct {
		name, url, token string
		want             int
		body             string
	}{
		{"anyone without a token is refused the extender's /inspect", admin + "/inspect", "", 401, "needs a bearer token"},
		{"a tenant's service account is refused the extender's /inspect", admin + "/inspect", tenant, 403, `nonResourceURLs [\"/inspect\"]`},
		{"a tenant's service account is refused /inspect/NODE", admin + "/inspect/adminauth-node", tenant, 403, "/inspect/*"},
		{"a tenant's service account is refused the extender's /metrics", admin + "/metrics", tenant, 403, "may not get /metrics"},
		{"a tenant's service account is refused the plugin's /metrics", plugin + "/metrics", tenant, 401, "needs the scrape token"},
		{"anyone without a token is refused the plugin's /metrics", plugin + "/metrics", "", 401, "needs the scrape token"},
		{"a forged token is refused", admin + "/metrics", "not-a-token", 401, "needs a bearer token"},
		{"metrics-reader reads the extender's /metrics", admin + "/metrics", prometheus, 200, "gpushare_"},
		{"metrics-reader's own token is not the plugin's scrape token", plugin + "/metrics", prometheus, 401, "metrics-token"},
		{"the scrape token reads the plugin's /metrics", plugin + "/metrics", scrape, 200, "gpushare_"},
		{"metrics-reader does not read /inspect", admin + "/inspect", prometheus, 403, "inspect-reader"},
		{"inspect-reader reads /inspect/NODE", admin + "/inspect/adminauth-node", operator, 200, "adminauth-node"},
		{"probes need no token", admin + "/readyz", "", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// RBAC bindings reach the authorizer's cache a moment after they are made.
			var code int
			var body string
			_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				code, body = httpGet(ctx, t, tc.url, tc.token)
				return code == tc.want, nil
			})
			if code != tc.want || !strings.Contains(body, tc.body) {
				t.Errorf("GET %s: %d %s\nwant %d containing %q", tc.url, code, body, tc.want, tc.body)
			}
		})
	}

	t.Run("a flood of forged tokens at the plugin's /metrics costs the API server no TokenReview", func(t *testing.T) {
		before := tokenReviews(ctx, t, c)
		for i := 0; i < 200; i++ {
			if code, body := httpGet(ctx, t, plugin+"/metrics", fmt.Sprintf("forged-%d", i)); code != 401 {
				t.Fatalf("forged token %d: %d %s, want 401", i, code, body)
			}
		}
		if after := tokenReviews(ctx, t, c); after != before {
			t.Errorf("TokenReviews the API server answered: %v before the flood, %v after; want none for it", before, after)
		}
	})
}

// tokenReviews is the API server's count of TokenReview creations
// (apiserver_request_total, resource tokenreviews).
func tokenReviews(ctx context.Context, t *testing.T, c *cluster.Cluster) float64 {
	t.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="tokenreviews"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				n += v
			}
		}
	}
	return n
}

// httpGet is GET url with token as bearer token ("" for none): code and body.
func httpGet(ctx context.Context, t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// grantSA binds service account ns/sa to a role (kind ClusterRole or Role) in ns.
func grantSA(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, sa, kind, role string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + role, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
