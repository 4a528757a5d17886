package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/test/cluster"
)

// An operator installing the Helm chart on a real cluster: every rendering
// hack/chart-check.sh produces (both scheduler modes, HA, device-list and ID
// strategies, isolation, no device plugin) is accepted by the real API
// server — schemas, RBAC role references, priority classes — with
// `kubectl apply --dry-run=server`. (The chart is not installed for real: the
// simulated nodes run no container images, so the extender could not come
// Ready; docs/e2e.md says what is and is not exercised.)
func TestChartManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	c := setup(t)
	script := filepath.Join(cluster.RepoRoot(), "hack", "chart-check.sh")
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(),
		"CHART_CHECK_SERVER_DRY_RUN=1",
		"KUBECONFIG="+c.Kubeconfig,
		"KUBECTL="+filepath.Join(cluster.BinDir(), "kubectl"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/chart-check.sh with server dry-run: %v\n%s", err, out)
	}
	for _, rendering := range []string{"dedicated", "extender-only", "ha", "strategies", "isolation", "no-deviceplugin", "node-scope", "dra"} {
		if !strings.Contains(string(out), "ok   server dry-run "+rendering+"\n") {
			t.Errorf("rendering %q was not validated by the API server:\n%s", rendering, out)
		}
	}
}
