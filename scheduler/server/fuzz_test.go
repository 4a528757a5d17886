package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// FuzzExtenderVerbs posts arbitrary bodies to each extender verb through the
// HTTP handler: whatever kube-scheduler (or anyone who can reach the port)
// sends, the extender answers 200 with a result or 4xx with a JSON error
// naming the problem; never a panic (gin's recovery would answer 500) and
// never a 5xx for bad input.
func FuzzExtenderVerbs(f *testing.F) {
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	names := []string{"n1", "n2", "ghost"}
	for _, v := range []any{
		extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names},
		extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "big").GPU("a", 50).GPU("b", 1).Obj(), NodeNames: &names},
		extenderv1.ExtenderArgs{Pod: pod, Nodes: &corev1.NodeList{Items: []corev1.Node{*fixture.MakeNode("n1").Card(0, 40).Obj()}}},
		// More gpu-mem containers than MaxGPUContainers: refused on every node.
		extenderv1.ExtenderArgs{Pod: podOfContainers("over-cap", MaxGPUContainers+1), NodeNames: &names},
		extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: pod.UID, Node: "n1"},
		extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: "other", Node: "n2"},
	} {
		b, _ := json.Marshal(v)
		for _, verb := range []string{"filter", "prioritize", "bind"} {
			f.Add(verb, string(b))
		}
	}
	for _, body := range []string{"", "{", "null", "[]", `{"Pod":null}`, `{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu-mem":"-1"}}}]}},"NodeNames":["n1"]}`, `{"NodeNames":["n1"]} trailing`} {
		for _, verb := range []string{"filter", "prioritize", "bind"} {
			f.Add(verb, body)
		}
	}
	nodes := []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Card(1, 24).Obj(), fixture.MakeNode("n2").Card(0, 80).Obj()}
	resident := podtest.Make("ns", "resident").GPU("main", 30).AssignOn("n1", api.PhaseAllocated, 0).Obj()
	e := newEnv(f, envOpts{maxBody: 1 << 20}, nodes, pod, resident)
	h := e.srv.Handler(nil)
	f.Fuzz(func(t *testing.T, verb, body string) {
		switch verb {
		case "filter", "prioritize", "bind":
		default:
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+verb, strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %q: 200 with a body that is not JSON: %q", verb, body, rec.Body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var eb errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == "" {
				t.Fatalf("%s %q: %d without a JSON error: %q", verb, body, rec.Code, rec.Body)
			}
		default:
			t.Fatalf("%s %q: status %d: %s", verb, body, rec.Code, rec.Body)
		}
	})
}
