package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Issue 5, test 2. Two nodes (40 GiB; 80 + 24 GiB). Before each pod of a
// sequence the test asks the extender itself (filter, then prioritize) which
// node it prefers; kube-scheduler, adding its own plugins' scores, must bind
// the pod to exactly that node, and the card must be binpack's choice on it
// (the smallest card whose free memory fits, by the test's own bookkeeping).
func TestBinpackSequenceLandsOnTheExtendersPreferredNodeAndCard(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nodeA, invA := gpuNode(ctx, t, c, "bp-a", "1x40GiB:NVIDIA-A100")
	_, invB := gpuNode(ctx, t, c, "bp-b", "1x80GiB:NVIDIA-H100,1x24GiB:NVIDIA-L4")
	ns := testNamespace(ctx, t, c, "bp")
	invs := map[string]api.Inventory{"bp-a": invA, "bp-b": invB}
	used := map[string]int64{} // card UUID -> units, the test's own bookkeeping

	for i, units := range []int64{10, 20, 20, 16, 30, 8} {
		pod := gpuPod(ns, fmt.Sprintf("s%d", i), units)
		preferred := extenderPreference(ctx, t, pod, []string{"bp-a", "bp-b"})
		got := runPod(ctx, t, c, pod, nodeA)
		asg := checkCards(ctx, t, c, got)
		if got.Spec.NodeName != preferred {
			t.Errorf("pod %s (%d GiB): kube-scheduler chose %s, the extender preferred %s", pod.Name, units, got.Spec.NodeName, preferred)
		}
		want := bestFit(invs[got.Spec.NodeName], used, units)
		card := asg.Containers[0].CardUUID
		if card != want {
			t.Errorf("pod %s (%d GiB) on %s: card %s, binpack's best fit is %s (used %v)", pod.Name, units, got.Spec.NodeName, card, want, used)
		}
		used[card] += units
		t.Logf("pod %s (%d GiB) -> %s card %s; %s | %s", pod.Name, units, got.Spec.NodeName, card,
			usage(invA, used), usage(invB, used))
	}
	checkCapacity(ctx, t, c, "bp-a", invA)
	checkCapacity(ctx, t, c, "bp-b", invB)
}

// extenderPreference asks the running extender which of nodes it prefers for
// pod: the filter's survivors, then the highest prioritize score (a tie is a
// test failure: the argument is that the extender decides).
func extenderPreference(ctx context.Context, t *testing.T, pod *corev1.Pod, nodes []string) string {
	t.Helper()
	base := fmt.Sprintf("http://127.0.0.1:%d", extenderPort)
	var filtered extenderv1.ExtenderFilterResult
	postJSON(ctx, t, base+"/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &filtered)
	if filtered.Error != "" || filtered.NodeNames == nil || len(*filtered.NodeNames) == 0 {
		t.Fatalf("extender filter for %s: %+v", pod.Name, filtered)
	}
	var scores extenderv1.HostPriorityList
	postJSON(ctx, t, base+"/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: filtered.NodeNames}, &scores)
	if len(scores) == 0 {
		t.Fatalf("extender prioritize for %s: no scores", pod.Name)
	}
	sort.Slice(scores, func(i, j int) bool { return scores[i].Score > scores[j].Score })
	if len(scores) > 1 && scores[0].Score == scores[1].Score {
		t.Fatalf("extender scores tie for %s: %+v", pod.Name, scores)
	}
	return scores[0].Host
}

func postJSON(ctx context.Context, t *testing.T, url string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
}

// bestFit is binpack's card on a node: the schedulable card with the least
// free memory that still fits units (lowest index on a tie).
func bestFit(inv api.Inventory, used map[string]int64, units int64) string {
	best, bestFree := "", int64(-1)
	for _, card := range inv.Cards {
		free := card.Units - used[card.UUID]
		if !card.Schedulable() || free < units {
			continue
		}
		if bestFree < 0 || free < bestFree {
			best, bestFree = card.UUID, free
		}
	}
	return best
}

// Issue 5, test 9. On a node of a 24 GiB and a 40 GiB card, binpack puts a
// 10 GiB pod on the 24 GiB card — unless an operator isolates that card
// (node annotation): then its units turn unhealthy, the inventory marks it
// isolated and the pod goes to the 40 GiB card. Lifting the isolation brings
// the card back.
func TestIsolatedCardTakesNoNewPodsUntilLifted(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "iso-node", "1x24GiB:NVIDIA-L4,1x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "iso")
	small, _ := inv.Card(0)
	large, _ := inv.Card(1)
	if small.Units >= large.Units {
		t.Fatalf("expected card 0 smaller than card 1: %+v", inv.Cards)
	}

	annotate := func(value *string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{api.DefaultNames().AnnotationIsolation(): value}}})
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "iso-node", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cardState := func(want api.CardState, allocatable int64) {
		t.Helper()
		if _, err := cluster.WaitNode(ctx, c.Client, "iso-node", time.Minute, fmt.Sprintf("card 0 %s, allocatable %d", want, allocatable), func(n *corev1.Node) bool {
			got, err := api.DefaultNames().InventoryFromNode(n)
			if err != nil {
				return false
			}
			card, ok := got.Card(0)
			q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
			return ok && card.State == want && q.Value() == allocatable
		}); err != nil {
			t.Fatalf("%v\nplugin log: %s", err, filepath.Join(c.NodeStateDir("iso-node"), "plugin.log"))
		}
	}

	isolate := "0"
	annotate(&isolate)
	cardState(api.CardIsolated, large.Units)
	p1 := runPod(ctx, t, c, gpuPod(ns, "while-isolated", 10), node)
	if got := checkCards(ctx, t, c, p1).Containers[0].CardUUID; got != large.UUID {
		t.Errorf("with card 0 isolated the pod went to %s, want card 1 %s", got, large.UUID)
	}

	annotate(nil)
	cardState(api.CardHealthy, small.Units+large.Units)
	p2 := runPod(ctx, t, c, gpuPod(ns, "after-lift", 10), node)
	if got := checkCards(ctx, t, c, p2).Containers[0].CardUUID; got != small.UUID {
		t.Errorf("after lifting the isolation the pod went to %s, want card 0 %s (binpack's best fit)", got, small.UUID)
	}
}

// Issue 5, test 10. `kubectl inspect gpushare -o json` against the live
// cluster, and with --from-extender against the live extender, agrees with
// the pods' assignments, card by card; the table and `-d` forms run and
// name the node.
func TestInspectorAgreesWithAssignments(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	inspector := productBinary(t, "kubectl-inspect-gpushare", "inspector")
	node, inv := gpuNode(ctx, t, c, "insp-node", "1x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "insp")
	for i, u := range []int64{30, 20, 50} {
		runPod(ctx, t, c, gpuPod(ns, fmt.Sprintf("i%d", i), u), node)
	}
	used := checkCapacity(ctx, t, c, "insp-node", inv)

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, inspector, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl-inspect-gpushare %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var view struct {
		Nodes []struct {
			Name  string `json:"name"`
			Cards []struct {
				UUID      string `json:"uuid"`
				Allocated int64  `json:"allocated"`
				Total     int64  `json:"total"`
			} `json:"cards"`
		} `json:"nodes"`
	}
	// From the API server, and from the extender's /inspect (the contract's
	// api.ExtenderNode, which the inspector reads): both agree with the
	// assignments.
	for _, args := range [][]string{{"-o", "json"}, {"--from-extender", fmt.Sprintf("http://127.0.0.1:%d", extenderPort), "-o", "json"}} {
		view.Nodes = nil
		if err := json.Unmarshal([]byte(run(args...)), &view); err != nil {
			t.Fatalf("inspector JSON (%v): %v", args, err)
		}
		found := false
		for _, n := range view.Nodes {
			if n.Name != "insp-node" {
				continue
			}
			found = true
			for _, card := range n.Cards {
				want, _ := inv.CardByUUID(card.UUID)
				if card.Allocated != used[card.UUID] || card.Total != want.Units {
					t.Errorf("inspector %v card %s: %d/%d, assignments say %d/%d", args, card.UUID, card.Allocated, card.Total, used[card.UUID], want.Units)
				}
			}
			if len(n.Cards) != len(inv.Cards) {
				t.Errorf("inspector %v shows %d cards, inventory has %d", args, len(n.Cards), len(inv.Cards))
			}
		}
		if !found {
			t.Fatalf("inspector JSON (%v) has no insp-node: %+v", args, view)
		}
	}
	for _, args := range [][]string{nil, {"-d"}} {
		if out := run(args...); !strings.Contains(out, "insp-node") {
			t.Errorf("kubectl-inspect-gpushare %v does not name the node:\n%s", args, out)
		}
	}
	t.Logf("kubectl inspect gpushare -d:\n%s", run("-d"))
}
