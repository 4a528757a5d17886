package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// KueueNamespace is where the Kueue controller keeps its webhook certificate
// (the namespace of Kueue's own manifests).
const KueueNamespace = "kueue-system"

// kueueConversionCRDs are the CRDs Kueue's manifests give a conversion webhook
// (config/components/crd/kustomization.yaml's webhook_in_* patches) and whose
// CA bundle its certificate rotator keeps: without the stanza the rotator
// never reports ready.
var kueueConversionCRDs = []string{"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}

// KueueVersion is the sigs.k8s.io/kueue version hack/build-kueue.sh builds:
// $KUEUE_VERSION, else hack/kueue-version.
func KueueVersion() (string, error) {
	if v := os.Getenv("KUEUE_VERSION"); v != "" {
		return v, nil
	}
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "kueue-version"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// KueueDir is where hack/build-kueue.sh puts the controller (bin/kueue) and
// its CRDs (crd/): ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/kueue-<version>.
func KueueDir() (string, error) {
	v, err := KueueVersion()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(filepath.Dir(BinDir())), "kueue-"+v), nil
}

// StartKueue applies Kueue's CRDs to the cluster and starts the Kueue
// controller (the batch/Job integration) with its defaults otherwise: its
// own certificate management, webhooks served on 127.0.0.1 but not
// registered with the API server (the test creates its Jobs suspended, as
// Kueue's Job webhook would make them), no leader election, no metrics or
// visibility server. It returns once the controller is ready.
func (c *Cluster) StartKueue(ctx context.Context) (*Process, error) {
	dir, err := KueueDir()
	if err != nil {
		return nil, err
	}
	binary := filepath.Join(dir, "bin", "kueue")
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("kueue: %s missing: run `make kueue` (hack/build-kueue.sh)", binary)
	}
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(dir, "crd")); err != nil {
		return nil, err
	}
	for _, crd := range kueueConversionCRDs {
		patch := fmt.Sprintf(`{"spec":{"conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],`+
			`"clientConfig":{"service":{"namespace":%q,"name":"kueue-webhook-service","path":"/convert"}}}}}}`, KueueNamespace)
		if _, err := c.Kubectl(ctx, "patch", "crd", crd+".kueue.x-k8s.io", "--type=merge", "-p", patch); err != nil {
			return nil, err
		}
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(dir, "crd")); err != nil {
		return nil, err
	}
	// The rotator writes its certificate into this (empty) Secret, which Kueue's manifests create.
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: KueueNamespace}}
	if _, err := c.Client.CoreV1().Secrets(KueueNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kueue: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	health, webhook, visibility := ports[0], ports[1], ports[2]
	certDir := filepath.Join(c.opts.StateDir, "kueue-certs")
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
integrations:
  frameworks: ["batch/job"]
`, KueueNamespace, health, webhook, certDir)
	file := filepath.Join(c.opts.StateDir, "kueue-config.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return nil, err
	}
	p, err := StartProcess("kueue", c.LogFile("kueue"), binary, "--config="+file, "--kubeconfig="+c.Kubeconfig,
		fmt.Sprintf("--visibility-server-port=%d", visibility), "--feature-gates=VisibilityOnDemand=false")
	if err != nil {
		return nil, err
	}
	// The rotator writes the webhook certificate into the Secret and waits for it in certDir, where
	// the kubelet would mount the Secret for Kueue's pod: the harness copies it there.
	if err := mountSecret(ctx, c, secret.Name, certDir, p); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("kueue: %w", err)
	}
	if err := p.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", health), 2*time.Minute); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("kueue: %w", err)
	}
	return p, nil
}

// mountSecret waits until the Secret in KueueNamespace holds tls.crt and tls.key and writes
// them into dir.
func mountSecret(ctx context.Context, c *Cluster, name, dir string, p *Process) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("exited: %v (log %s)", err, p.LogPath)
		}
		s, err := c.Client.CoreV1().Secrets(KueueNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		return len(s.Data["tls.crt"]) > 0 && len(s.Data["tls.key"]) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("no certificate in Secret %s/%s: %w (last error: %v; log %s)", KueueNamespace, name, err, last, p.LogPath)
	}
	s, err := c.Client.CoreV1().Secrets(KueueNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), s.Data[f], 0o600); err != nil {
			return err
		}
	}
	return nil
}
