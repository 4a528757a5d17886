package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The inspector shows what DRA claims hold on a card: the node agent in DRA
// mode publishes one 40Gi card, the real kube-scheduler allocates claims of
// 10Gi and 20Gi on it, and `kubectl inspect gpushare` shows the card with
// 30 GiB allocated, all of it by the two claims, each with its pod, whether
// it reads the API server or the extender's /inspect.
func TestInspectorShowsDRAClaims(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inspector := productBinary(t, "kubectl-inspect-gpushare", "inspector")
	ns := testNamespace(ctx, t, c, "drainsp")
	applyDeviceClass(ctx, t, c, ns)
	draNode(ctx, t, c, "dra-insp", "1x40GiB:NVIDIA-A100")
	for _, cl := range []struct{ name, memory string }{{"ten", "10Gi"}, {"twenty", "20Gi"}} {
		if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, cl.name, cl.memory), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, claimPod(ns, cl.name, cl.name, "dra-insp"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ten", "twenty"} {
		waitScheduled(ctx, t, c, ns, name, "dra-insp")
	}

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, inspector, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl-inspect-gpushare %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	type claim struct {
		Namespace string   `json:"namespace"`
		Name      string   `json:"name"`
		Units     int64    `json:"units"`
		Pods      []string `json:"pods"`
	}
	var view struct {
		Nodes []struct {
			Name  string `json:"name"`
			DRA   bool   `json:"dra"`
			Cards []struct {
				Index     int     `json:"index"`
				Allocated int64   `json:"allocated"`
				Claimed   int64   `json:"claimed"`
				Total     int64   `json:"total"`
				Claims    []claim `json:"claims"`
			} `json:"cards"`
		} `json:"nodes"`
		Warnings []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"warnings"`
	}
	want := fmt.Sprintf("card 0: 30/40 allocated, 30 by claims [{%[1]s ten 10 [ten]} {%[1]s twenty 20 [twenty]}]", ns)
	// The extender's informers may see the second allocation a moment after
	// the API server does: poll its answer for the same figures.
	for _, args := range [][]string{{"dra-insp", "-o", "json"}, {"--from-extender", fmt.Sprintf("http://127.0.0.1:%d", extenderPort), "dra-insp", "-o", "json"}} {
		var got string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			view.Nodes, view.Warnings = nil, nil
			if err := json.Unmarshal([]byte(run(args...)), &view); err != nil {
				return false, err
			}
			if len(view.Nodes) != 1 || !view.Nodes[0].DRA || len(view.Nodes[0].Cards) != 1 {
				got = fmt.Sprintf("%+v", view)
				return false, nil
			}
			card := view.Nodes[0].Cards[0]
			got = fmt.Sprintf("card %d: %d/%d allocated, %d by claims %v", card.Index, card.Allocated, card.Total, card.Claimed, card.Claims)
			return got == want, nil
		})
		if err != nil {
			t.Errorf("inspector %v: %s (%v), want %s", args, got, err, want)
		}
		for _, w := range view.Warnings {
			t.Errorf("inspector %v warns %s: %s", args, w.Code, w.Message)
		}
	}
	details := run("dra-insp", "-d")
	for _, line := range []string{"through DRA (ResourceClaims); claims hold 30 GiB", ns + "/ten", ns + "/twenty"} {
		if !strings.Contains(details, line) {
			t.Errorf("inspector -d lacks %q:\n%s", line, details)
		}
	}
}
