package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func do(t testing.TB, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHTTPBadInput(t *testing.T) {
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	podJSON := mustJSON(t, pod)
	tests := []struct {
		name       string
		opts       envOpts
		method     string
		path       string
		body       string
		wantStatus int
		wantError  string
	}{
		{"filter: malformed JSON", envOpts{}, "POST", "/filter", `{"Pod":`, 400, "bad request: malformed JSON: unexpected EOF"},
		{"filter: wrong field type", envOpts{}, "POST", "/filter", `{"Pod": 5}`, 400, "bad request: malformed JSON: json: cannot unmarshal number into Go struct field ExtenderArgs.Pod of type v1.Pod"},
		{"filter: empty body", envOpts{}, "POST", "/filter", ``, 400, "bad request: malformed JSON: EOF"},
		{"filter: null body", envOpts{}, "POST", "/filter", `null`, 400, "bad request: Pod is missing"},
		{"filter: no pod", envOpts{}, "POST", "/filter", `{"NodeNames": ["n1"]}`, 400, "bad request: Pod is missing"},
		{"filter: no nodes", envOpts{}, "POST", "/filter", `{"Pod": ` + podJSON + `}`, 400, "bad request: neither NodeNames nor Nodes is set"},
		{"filter: trailing data", envOpts{}, "POST", "/filter", `{"Pod": ` + podJSON + `, "NodeNames": []} {}`, 400, "bad request: trailing data after the JSON body"},
		{"filter: body too large", envOpts{maxBody: 64}, "POST", "/filter", `{"Pod": ` + podJSON + `, "NodeNames": []}`, 413, "request body over 64 bytes: http: request body too large"},
		{"filter: cache not synced", envOpts{unsynced: true}, "POST", "/filter", `{"Pod": ` + podJSON + `, "NodeNames": ["n1"]}`, 503, "the gpushare extender's cache has not synced yet"},
		{"prioritize: malformed JSON", envOpts{}, "POST", "/prioritize", `[]`, 400, "bad request: malformed JSON: json: cannot unmarshal array into Go value of type v1.ExtenderArgs"},
		{"prioritize: no pod", envOpts{}, "POST", "/prioritize", `{"NodeNames": ["n1"]}`, 400, "bad request: Pod is missing"},
		{"bind: malformed JSON", envOpts{}, "POST", "/bind", `{"PodName": 1}`, 400, "bad request: malformed JSON: json: cannot unmarshal number into Go struct field ExtenderBindingArgs.PodName of type string"},
		{"bind: no pod name", envOpts{}, "POST", "/bind", `{"PodNamespace": "ns", "PodUID": "u", "Node": "n1"}`, 400, "bad request: PodName is missing"},
		{"bind: no namespace", envOpts{}, "POST", "/bind", `{"PodName": "p", "PodUID": "u", "Node": "n1"}`, 400, "bad request: PodNamespace is missing"},
		{"bind: no UID", envOpts{}, "POST", "/bind", `{"PodName": "p", "PodNamespace": "ns", "Node": "n1"}`, 400, "bad request: PodUID is missing"},
		{"bind: no node", envOpts{}, "POST", "/bind", `{"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}`, 400, "bad request: Node is missing"},
		{"bind: cache not synced", envOpts{unsynced: true}, "POST", "/bind", `{"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"}`, 503, "the gpushare extender's cache has not synced yet"},
		{"verb with the wrong method", envOpts{}, "GET", "/filter", ``, 404, "not found: GET /filter"},
		{"preempt: no pod", envOpts{}, "POST", "/preempt", `{"NodeNameToMetaVictims": {}}`, 400, "bad request: Pod is missing"},
		{"preempt: no candidates", envOpts{}, "POST", "/preempt", `{"Pod": {"metadata": {"name": "p"}}}`, 400, "bad request: neither NodeNameToMetaVictims nor NodeNameToVictims is set"},
		{"preempt: cache not synced", envOpts{unsynced: true}, "POST", "/preempt", `{"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": {}}`, 503, "the gpushare extender's cache has not synced yet"},
		{"unknown path", envOpts{}, "POST", "/unreserve", `{}`, 404, "not found: POST /unreserve"},
		{"inspect an unknown node", envOpts{}, "GET", "/inspect/ghost", ``, 404, `not found: node "ghost" is not in the extender's cache`},
		{"readyz before sync", envOpts{unsynced: true}, "GET", "/readyz", ``, 503, "the gpushare extender's cache has not synced yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj()}, pod)
			rec := do(t, e.srv.Handler(e.reg), tc.method, tc.path, tc.body)
			if rec.Code != tc.wantStatus {
				t.Errorf("status %d, want %d (body %s)", rec.Code, tc.wantStatus, rec.Body)
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("error body is not JSON: %v: %s", err, rec.Body)
			}
			if body.Error != tc.wantError {
				t.Errorf("error:\n got %s\nwant %s", body.Error, tc.wantError)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("bad input caused API writes %v", w)
			}
		})
	}
}

func TestHTTPVerbs(t *testing.T) {
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	resident := podtest.Make("ns", "resident").GPU("main", 30).AssignOn("n1", api.PhaseAllocated, 0).Obj()
	e := newEnv(t, envOpts{}, []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj(), fixture.MakeNode("n2").Card(0, 40).Obj()}, pod, resident)
	h := e.srv.Handler(e.reg)

	// Filter, as kube-scheduler sends it with nodeCacheCapable: true.
	rec := do(t, h, "POST", "/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")}))
	var fr extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(rec.Body.Bytes(), &fr); rec.Code != 200 || err != nil {
		t.Fatalf("filter: %d %v %s", rec.Code, err, rec.Body)
	}
	if diff := cmp.Diff(names("n1"), fr.NodeNames); diff != "" {
		t.Errorf("filter NodeNames (-want +got):\n%s", diff)
	}

	rec = do(t, h, "POST", "/prioritize", mustJSON(t, extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "n2")}))
	var pr extenderv1.HostPriorityList
	if err := json.Unmarshal(rec.Body.Bytes(), &pr); rec.Code != 200 || err != nil {
		t.Fatalf("prioritize: %d %v %s", rec.Code, err, rec.Body)
	}
	if diff := cmp.Diff(extenderv1.HostPriorityList{{Host: "n1", Score: 10}, {Host: "n2", Score: 0}}, pr); diff != "" {
		t.Errorf("prioritize (-want +got):\n%s", diff)
	}

	// Bind: success, then the same pod again (already bound: an error
	// result with 200, which kube-scheduler shows in the pod's events).
	for i, wantErr := range []string{"", "bind ns/p: pod is already bound to n1"} {
		rec = do(t, h, "POST", "/bind", mustJSON(t, bindArgs(pod, "n1")))
		var br extenderv1.ExtenderBindingResult
		if err := json.Unmarshal(rec.Body.Bytes(), &br); rec.Code != 200 || err != nil {
			t.Fatalf("bind %d: %d %v %s", i, rec.Code, err, rec.Body)
		}
		if br.Error != wantErr {
			t.Errorf("bind %d: error %q, want %q", i, br.Error, wantErr)
		}
	}

	// Inspect.
	rec = do(t, h, "GET", "/inspect/n1", "")
	var ni api.ExtenderNode
	if err := json.Unmarshal(rec.Body.Bytes(), &ni); rec.Code != 200 || err != nil {
		t.Fatalf("inspect: %d %v %s", rec.Code, err, rec.Body)
	}
	wantNI := api.ExtenderNode{Name: "n1", Unit: api.UnitGiB, Cards: []api.ExtenderCard{{
		Index: 0, UUID: podtest.CardUUID("n1", 0), Model: "A100", State: api.CardHealthy, Capacity: 40, Used: 40,
		Pods: []api.ExtenderPod{
			{Namespace: "ns", Name: "p", UID: pod.UID, Container: "main", Units: 10, State: cache.Assumed, Phase: api.PhaseAssigned},
			{Namespace: "ns", Name: "resident", UID: resident.UID, Container: "main", Units: 30, State: cache.Confirmed, Phase: api.PhaseAllocated},
		},
	}}}
	if diff := cmp.Diff(wantNI, ni); diff != "" {
		t.Errorf("inspect n1 (-want +got):\n%s", diff)
	}
	rec = do(t, h, "GET", "/inspect", "")
	var all []api.ExtenderNode
	if err := json.Unmarshal(rec.Body.Bytes(), &all); rec.Code != 200 || err != nil || len(all) != 2 {
		t.Fatalf("inspect all: %d %v %s", rec.Code, err, rec.Body)
	}

	for _, path := range []string{"/healthz", "/readyz"} {
		if rec := do(t, h, "GET", path, ""); rec.Code != 200 {
			t.Errorf("%s: %d", path, rec.Code)
		}
	}

	rec = do(t, h, "GET", "/metrics", "")
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`gpushare_card_used_units{card="0",node="n1",uuid="GPU-n1-0"} 40`,
		`gpushare_card_capacity_units{card="0",node="n2",uuid="GPU-n2-0"} 40`,
		`gpushare_extender_binds_total{outcome="bound"} 1`,
		`gpushare_extender_binds_total{outcome="invalid"} 1`,
		`gpushare_extender_request_duration_seconds_count{verb="filter"} 1`,
		`gpushare_extender_request_duration_seconds_count{verb="prioritize"} 1`,
		`gpushare_extender_request_duration_seconds_count{verb="bind"} 2`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
