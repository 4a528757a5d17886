package inspect

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/api"
)

// extenderNodes is what the extender's cache would show, in the contract's
// types that the extender itself encodes (api.ExtenderNode).
func extenderNodes() []api.ExtenderNode {
	return []api.ExtenderNode{
		{Name: "cpu-1", Cards: []api.ExtenderCard{}},
		{Name: "gpu-b", Unit: api.UnitGiB, Cards: []api.ExtenderCard{
			{Index: 1, UUID: "GPU-b1", Model: a100, State: api.CardUnhealthy, Capacity: 40, Used: 0, Pods: []api.ExtenderPod{}},
			{Index: 0, UUID: "GPU-b0", Model: a100, State: api.CardHealthy, Capacity: 40, Used: 30, Pods: []api.ExtenderPod{
				{Namespace: "ml", Name: "train", UID: "u1", Container: "c", Units: 20, State: api.ExtenderPodConfirmed, Phase: api.PhaseAllocated},
				{Namespace: "ml", Name: "new", UID: "u2", Container: "c", Units: 10, State: api.ExtenderPodAssumed, Phase: api.PhaseAssigned},
			}},
		}, Unplaced: []api.ExtenderPod{
			{Namespace: "ml", Name: "lost", UID: "u3", Container: "c", Units: 5, State: api.ExtenderPodConfirmed, Phase: api.PhaseAllocated},
		}},
		{Name: "gpu-a", InventoryError: "node gpu-a: " + api.ErrNoInventory.Error(), InventoryErrorCode: api.InventoryErrorMissing, Cards: []api.ExtenderCard{}},
	}
}

// fakeExtender serves GET /inspect and /inspect/NODE like the extender does.
func fakeExtender(t *testing.T, nodes []api.ExtenderNode) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/inspect" {
			_ = json.NewEncoder(w).Encode(nodes)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/inspect/")
		for _, n := range nodes {
			if n.Name == name {
				_ = json.NewEncoder(w).Encode(n)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "not found: node \"" + name + "\" is not in the extender's cache"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFromExtender(t *testing.T) {
	srv := fakeExtender(t, extenderNodes())
	out, _, err := runCmd(t, nil, "--from-extender", srv.URL, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got View
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	lost := "pod ml/lost container c: the extender holds 5 GiB for it on a card node gpu-b's inventory does not list; not counted"
	want := View{
		Version: ViewVersion, Source: SourceExtender,
		Nodes: []Node{
			{Name: "gpu-a", InventoryError: "node gpu-a: " + api.ErrNoInventory.Error(), Cards: []Card{}, Uncounted: []Uncounted{}},
			{Name: "gpu-b", Unit: api.UnitGiB, Allocated: 30, Total: 80, InServiceAllocated: 30, InService: 40, Free: 10, LargestFree: 10, Cards: []Card{
				{Index: 0, UUID: "GPU-b0", Model: a100, State: api.CardHealthy, Allocated: 30, Total: 40, Pods: []Pod{
					{Namespace: "ml", Name: "new", Container: "c", Units: 10, Phase: api.PhaseAssigned, Pending: true},
					{Namespace: "ml", Name: "train", Container: "c", Units: 20, Phase: api.PhaseAllocated},
				}},
				{Index: 1, UUID: "GPU-b1", Model: a100, State: api.CardUnhealthy, Total: 40, Pods: []Pod{}},
			}, Uncounted: []Uncounted{{Namespace: "ml", Name: "lost", Container: "c", Code: WarnUnknownCard, Message: lost}}},
		},
		Totals: []Total{{Unit: api.UnitGiB, Allocated: 30, Total: 80, Percent: 38, InServiceAllocated: 30, InService: 40, InServicePercent: 75, Free: 10, LargestFree: 10}},
		Models: []ModelSummary{{Model: a100, Unit: api.UnitGiB, Nodes: 1, Cards: 2, InServiceCards: 1, InServiceAllocated: 30, InService: 40, Free: 10, LargestFree: 10}},
		Warnings: []Warning{
			{Node: "gpu-a", Code: WarnNoInventory, Message: "node gpu-a: " + api.ErrNoInventory.Error() + " (as the extender sees it)"},
			{Node: "gpu-b", Pod: "ml/lost", Code: WarnUnknownCard, Message: lost},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("view from the extender (-want +got):\n%s", diff)
	}

	table, _, err := runCmd(t, nil, "--from-extender", srv.URL+"/", "gpu-b")
	if err != nil {
		t.Fatal(err)
	}
	wantTable := `Source: the gpushare scheduler extender's cache (binds in flight included; no addresses, cordons or kubelet figures).

NAME   GPU0   GPU1    NODE(GiB)  FREE  MAX FREE
gpu-b  30/40  0/40 U  30/80      10    10
GPUn: allocated/total on card n (U unhealthy); NODE: on the node.
FREE: what new pods can still get on the node; MAX FREE: the most of it on one card.

Warnings (1):
  UnknownCard: ` + lost + "\n"
	if diff := cmp.Diff(strings.Split(wantTable, "\n"), strings.Split(table, "\n")); diff != "" {
		t.Errorf("one node from the extender (-want +got):\n%s", diff)
	}
}

func TestFromExtenderErrors(t *testing.T) {
	srv := fakeExtender(t, extenderNodes())
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"cache not synced yet"}`))
	}))
	defer broken.Close()
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`<html>`))
	}))
	defer notJSON.Close()

	cases := []struct {
		name    string
		args    []string
		wantIs  error
		code    int
		wantMsg string
	}{
		{"unknown node", []string{"--from-extender", srv.URL, "gpu-zz"}, ErrNodeNotFound, ExitError, `node "gpu-zz": node not found (the extender at`},
		{"extender not ready", []string{"--from-extender", broken.URL}, nil, ExitError, "answered 503 Service Unavailable: cache not synced yet"},
		{"not the extender", []string{"--from-extender", notJSON.URL}, nil, ExitError, "answered JSON this inspector does not read"},
		{"not a URL", []string{"--from-extender", "localhost:12345"}, ErrUsage, ExitUsage, "want the extender's base URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runCmd(t, nil, c.args...)
			if err == nil {
				t.Fatalf("no error; printed %q", out)
			}
			if c.wantIs != nil && !errors.Is(err, c.wantIs) {
				t.Errorf("error %v does not match %v", err, c.wantIs)
			}
			if ExitCode(err) != c.code {
				t.Errorf("ExitCode = %d, want %d", ExitCode(err), c.code)
			}
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("error %q, want it to contain %q", err, c.wantMsg)
			}
		})
	}
}

// TestFromExtenderWarningFollowsTheInventoryErrorCode checks that the
// warning for a node whose cards the extender cannot use comes from the
// code the extender sends, never from its message text.
func TestFromExtenderWarningFollowsTheInventoryErrorCode(t *testing.T) {
	noInv := "node gpu-a: " + api.ErrNoInventory.Error()
	cases := []struct {
		name string
		code api.InventoryErrorCode
		msg  string
		want WarningCode
	}{
		{"no inventory", api.InventoryErrorMissing, noInv, WarnNoInventory},
		{"an inventory that does not decode", api.InventoryErrorInvalid, "node gpu-a: invalid GPU inventory: unexpected end of JSON input", WarnInvalidInventory},
		{"an isolation annotation that does not parse", api.InventoryErrorIsolation, `node gpu-a: isolation: "card-one" is neither a card index nor a GPU UUID (GPU-…)`, WarnInvalidIsolation},
		{"the code wins over a message that names another problem", api.InventoryErrorInvalid, noInv, WarnInvalidInventory},
		{"an extender that sends no code", "", noInv, WarnInvalidInventory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := viewFromExtender([]api.ExtenderNode{{Name: "gpu-a", InventoryError: c.msg, InventoryErrorCode: c.code, Cards: []api.ExtenderCard{}}}, nil)
			want := []Warning{{Node: "gpu-a", Code: c.want, Message: c.msg + " (as the extender sees it)"}}
			if diff := cmp.Diff(want, v.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromExtenderShowsTheCardsReason(t *testing.T) {
	v := viewFromExtender([]api.ExtenderNode{{Name: "gpu-a", Unit: api.UnitGiB, Cards: []api.ExtenderCard{
		{Index: 0, UUID: "GPU-a0", State: api.CardUnhealthy, Reason: "XID 79", Capacity: 40, Pods: []api.ExtenderPod{}},
	}}}, nil)
	if got := v.Nodes[0].Cards[0]; got.State != api.CardUnhealthy || got.Reason != "XID 79" {
		t.Errorf("card: state %q reason %q, want unhealthy, XID 79", got.State, got.Reason)
	}
}

// The extender's DRA nodes and claims come through --from-extender as they
// do from the API server; an answer without them says why in a Warning
// header, which becomes a DRAUnreadable warning.
func TestFromExtenderShowsTheDRAClaims(t *testing.T) {
	dra := api.ExtenderNode{Name: "d1", Unit: api.UnitGiB, DRA: true, Cards: []api.ExtenderCard{{
		Index: 0, UUID: "GPU-d0", Model: a100, State: api.CardHealthy, Capacity: 40, Used: 15, Claimed: 15, Pods: []api.ExtenderPod{},
		Claims: []api.ExtenderClaim{{Namespace: "ns", Name: "ten", Request: "gpu", Device: "card-0", Units: 10, Pods: []string{"p"}}, {Namespace: "ns", Name: "idle", Request: "gpu", Device: "card-0", Units: 5}},
	}}, UnplacedClaims: []api.ExtenderClaim{{Namespace: "ns", Name: "lost", Request: "gpu", Device: "card-3", Memory: resource.MustParse("4Gi"), Units: 4}}}
	v := viewFromExtender([]api.ExtenderNode{dra}, nil)
	n := v.Nodes[0]
	c := n.Cards[0]
	if !n.DRA || n.Claimed != 15 || c.Allocated != 15 || c.Claimed != 15 || len(c.Claims) != 2 || c.Claims[0].Name != "idle" || n.Free != 25 {
		t.Errorf("DRA node %+v, want DRA with card 0 holding 15 of claims idle and ten, 25 free", n)
	}
	if len(n.Uncounted) != 1 || !n.Uncounted[0].Claim || len(v.Warnings) != 1 || v.Warnings[0].Claim != "ns/lost" || v.Warnings[0].Code != WarnUnknownCard {
		t.Errorf("the claim on card-3: uncounted %+v, warnings %+v", n.Uncounted, v.Warnings)
	}

	h := http.Header{}
	h.Add("Warning", `299 - "DRAUnreadable: the extender has not read the DRA ResourceSlices and ResourceClaims yet"`)
	h.Add("Warning", `299 - "something else"`)
	want := []Warning{{Code: WarnDRAUnreadable, Message: "the extender has not read the DRA ResourceSlices and ResourceClaims yet; DRA claims are not counted (as the extender sees it)"}}
	if diff := cmp.Diff(want, draWarnings(h)); diff != "" {
		t.Errorf("warnings from the headers (-want +got):\n%s", diff)
	}
}
