package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/cluster"
)

// In extender-only mode the verbs are reachable by any pod through the
// Service: the chart serves them over HTTPS and requires kube-scheduler's
// client certificate. With the chart's own material (helm template), a
// client without the certificate fails the TLS handshake, and the real
// kube-scheduler configured with the chart's extender stanza (the Secret
// <release>-extender-stanza, only its URL pointed at 127.0.0.1) schedules a
// GPU pod through the extender.
func TestExtenderOnlyTLSWithTheChartsStanza(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	secrets := renderExtenderTLS(ctx, t)
	dir := t.TempDir()
	files := map[string][]byte{
		"tls.crt": secrets["gpushare-extender-tls"]["tls.crt"],
		"tls.key": secrets["gpushare-extender-tls"]["tls.key"],
		"ca.crt":  secrets["gpushare-extender-tls"]["ca.crt"],
	}
	for name, b := range files {
		if len(b) == 0 {
			t.Fatalf("the chart's extender-tls Secret has no %s", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	adminPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := cluster.StartProcess("gpushare-scheduler-tls", filepath.Join(c.StateDir(), "logs", "gpushare-scheduler-tls.log"), extenderBin,
		"--kubeconfig", c.Kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-private-key-file", filepath.Join(dir, "tls.key"), "--client-ca-file", filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	if err := p.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", adminPort), time.Minute); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", port)

	t.Run("a client without kube-scheduler's certificate fails the handshake", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(files["ca.crt"])
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		resp, err := client.Post(url+"/bind", "application/json", strings.NewReader(`{"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"n"}`))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("POST /bind without a client certificate: %s, want the handshake refused", resp.Status)
		}
		if !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("POST /bind without a client certificate: %v, want the TLS alert 'certificate required'", err)
		}
		plain := &http.Client{Timeout: 10 * time.Second}
		if resp, err := plain.Post(strings.Replace(url, "https", "http", 1)+"/bind", "application/json", strings.NewReader(`{}`)); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain HTTP to the verbs: %s, want 400 (HTTP to an HTTPS server)", resp.Status)
			}
		}
	})

	t.Run("kube-scheduler with the chart's stanza schedules through it", func(t *testing.T) {
		stanza := secrets["gpushare-extender-stanza"]["extender.yaml"]
		if !bytes.Contains(stanza, []byte("enableHTTPS: true")) || !bytes.Contains(stanza, []byte("certData:")) {
			t.Fatalf("the chart's stanza lacks HTTPS or the client certificate:\n%s", stanza)
		}
		config := filepath.Join(dir, "kube-scheduler-tls.yaml")
		head := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 100\nprofiles:\n  - schedulerName: " + schedulerName + "\nextenders:\n"
		if err := os.WriteFile(config, append([]byte(head), stanza...), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.RestartSchedulerWith(ctx, config, url); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.RestartSchedulerWith(context.Background(), filepath.Join(cluster.RepoRoot(), cluster.SchedulerConfigFile), fmt.Sprintf("http://127.0.0.1:%d", extenderPort)); err != nil {
				t.Errorf("restoring kube-scheduler: %v", err)
			}
		})
		ns := testNamespace(ctx, t, c, "tls")
		node, _ := gpuNode(ctx, t, c, "tls-node", "1x40GiB:NVIDIA-A100")
		pod := gpuPod(ns, "through-tls", 10)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "tls-node"}
		got := runPod(ctx, t, c, pod, node)
		checkCards(ctx, t, c, got)
	})
}

// renderExtenderTLS renders the chart in extender-only mode (127.0.0.1 added
// to the extender's certificate) and returns its Secrets' decoded data by name.
func renderExtenderTLS(ctx context.Context, t *testing.T) map[string]map[string][]byte {
	t.Helper()
	out := renderChart(ctx, t, "gpushare-system", "templates/extender-tls.yaml",
		"--set", "scheduler.mode=extender-only", "--set", "scheduler.extender.tls.extraSANs={127.0.0.1}")
	secrets := map[string]map[string][]byte{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var s corev1.Secret
		if err := yaml.Unmarshal(doc, &s); err != nil || s.Kind != "Secret" {
			continue
		}
		data := map[string][]byte{}
		for k, v := range s.Data {
			data[k] = v
		}
		for k, v := range s.StringData {
			data[k] = []byte(v)
		}
		secrets[s.Name] = data
	}
	if len(secrets) != 2 {
		t.Fatalf("extender-tls.yaml rendered %d Secrets, want the extender's and the stanza's:\n%s", len(secrets), out)
	}
	return secrets
}
