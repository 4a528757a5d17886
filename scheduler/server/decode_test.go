package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// decodeArgsSeeds are bodies for FuzzDecodeArgs and TestDecodeArgs: what
// kube-scheduler sends, and shapes only encoding/json may decide.
func decodeArgsSeeds() []string {
	pod := fixture.MakePod("ns", "p").GPU("main", 10).Obj()
	names := []string{"n1", "node-2.example.com", "ghost"}
	var seeds []string
	for _, v := range []any{
		extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names},
		extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{}},
		extenderv1.ExtenderArgs{Pod: pod, Nodes: &corev1.NodeList{Items: []corev1.Node{*fixture.MakeNode("n1").Card(0, 40).Obj()}}},
		extenderv1.ExtenderArgs{},
	} {
		b, _ := json.Marshal(v)
		seeds = append(seeds, string(b))
	}
	return append(seeds,
		``, `{`, `}`, `null`, `[]`, `{}`, ` { } `, `{} x`, `{}{}`, `"s"`, `1`,
		`{"Pod":null,"NodeNames":null}`,
		`{"pod":{"metadata":{"name":"p"}},"nodenames":["a","b"]}`,
		`{"NodeNames":["a"],"NodeNames":["b"]}`,
		`{"NodeNames":["a"],"nodeNames":["b"]}`,
		`{"Pod":{"metadata":{"name":"a"}},"Pod":{"metadata":{"namespace":"b"}}}`,
		`{"NodeNames":["a\"b","c"]}`, `{"NodeNames":["a\u0062"]}`, `{"NodeNames":["日本"]}`, `{"NodeNames":["a\xffb"]}`,
		`{"NodeNames":[ "a" , "b" ] , "Pod" : { } }`,
		`{"NodeNames":["a",]}`, `{"NodeNames":["a" "b"]}`, `{"NodeNames":[1]}`, `{"NodeNames":"a"}`, `{"NodeNames":nul}`, `{"NodeNames":nullx}`,
		`{"Other":{"x":[1,2,{"y":"}"}]},"NodeNames":["a"]}`, `{"Other":{"x":]},"NodeNames":["a"]}`, `{"Other":tru,"NodeNames":["a"]}`,
		`{"Pod":{"spec":{"containers":"no"}},"NodeNames":["a"]}`, `{"Pod":5}`, `{"Nodes":{"items":[{"metadata":{"name":"n"}}]}}`,
		`{"N\u006fdeNames":["a"]}`, `{"Nodeſ":{"items":[]}}`, `{"NodeNames":["a"]`, `{"NodeNames":["a"]}   `, `{"NodeNames":["a"]} trailing`,
	)
}

// TestDecodeArgs: every seed decodes as encoding/json decodes it, with the
// same error, and kube-scheduler's shape takes the fast path.
func TestDecodeArgs(t *testing.T) {
	for _, body := range decodeArgsSeeds() {
		compareDecodeArgs(t, body)
	}
	var fast extenderv1.ExtenderArgs
	if !fastArgs([]byte(decodeArgsSeeds()[0]), &fast) {
		t.Errorf("kube-scheduler's filter body does not take the fast path")
	}
}

// FuzzDecodeArgs: for any body, decodeArgsBytes gives what encoding/json
// gives (the same ExtenderArgs, or an error with the same message).
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range decodeArgsSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) { compareDecodeArgs(t, body) })
}

func compareDecodeArgs(t *testing.T, body string) {
	t.Helper()
	var got, want extenderv1.ExtenderArgs
	gotErr := decodeArgsBytes([]byte(body), &got)
	wantErr := decodeJSON(strings.NewReader(body), &want)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("body %q: error %v, encoding/json: %v", body, gotErr, wantErr)
	}
	if gotErr == nil {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("body %q: decoded (-encoding/json +ours):\n%s", body, diff)
		}
	}
}
