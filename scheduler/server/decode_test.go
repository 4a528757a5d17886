package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// decodeArgsSeeds are bodies for FuzzDecodeArgs and TestDecodeArgs: what
// kube-scheduler sends, and shapes only encoding/json may decide.
func decodeArgsSeeds() []string {
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
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
	if !fastArgs([]byte(decodeArgsSeeds()[0]), &fast, nil) {
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
	gotErr := decodeArgsBytes([]byte(body), &got, nil)
	wantErr := decodeJSON(strings.NewReader(body), &want)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("body %q: error %v, encoding/json: %v", body, gotErr, wantErr)
	}
	if gotErr == nil {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("body %q: decoded (-encoding/json +ours):\n%s", body, diff)
		}
	}
	// With the names resolved against a cache, as the handlers decode.
	var resolved extenderv1.ExtenderArgs
	r := nameResolver{cache: decodeCache, snapPool: &slicePool[*allocator.Node]{}, idPool: &slicePool[int32]{}}
	resErr := decodeArgsBytes([]byte(body), &resolved, &r)
	if (resErr == nil) != (wantErr == nil) || (resErr != nil && resErr.Error() != wantErr.Error()) {
		t.Fatalf("body %q, names resolved: error %v, encoding/json: %v", body, resErr, wantErr)
	}
	if resErr != nil {
		return
	}
	if diff := cmp.Diff(want, resolved); diff != "" {
		t.Fatalf("body %q, names resolved: decoded (-encoding/json +ours):\n%s", body, diff)
	}
	if r.cands.snaps != nil {
		if resolved.NodeNames == nil || len(r.cands.snaps) != len(*resolved.NodeNames) || len(r.cands.ids) != len(r.cands.snaps) {
			t.Fatalf("body %q: %d snapshots, %d IDs for names %v", body, len(r.cands.snaps), len(r.cands.ids), resolved.NodeNames)
		}
		for i, n := range *resolved.NodeNames {
			if s := r.cands.snaps[i]; (s == nil) != (n != "n1" && n != "a") || (s != nil && (s.Name != n || s.ID != r.cands.ids[i])) {
				t.Fatalf("body %q: name %q resolved to %v, ID %d", body, n, s, r.cands.ids[i])
			}
		}
	}
}

// decodeCache knows the nodes n1 and a, for compareDecodeArgs.
var decodeCache = func() *cache.Cache {
	c := cache.New()
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	c.SetNode(fixture.MakeNode("a").Card(0, 40).Obj())
	return c
}()

// TestDecodeArgsResolvesNamesAgainstTheCache: with a resolver the fast path
// gives the same args, the candidates' snapshots in order (nil for a node
// the cache does not know), the known names as the cache's own strings and
// the unknown ones as copies: nothing refers to the body, which goes back
// to its pool.
func TestDecodeArgsResolvesNamesAgainstTheCache(t *testing.T) {
	e := newEnv(t, envOpts{}, []*corev1.Node{
		fixture.MakeNode("n1").Card(0, 40).Obj(), fixture.MakeNode("node-2.example.com").Card(0, 40).Obj(),
	})
	body := []byte(decodeArgsSeeds()[0]) // NodeNames n1, node-2.example.com, ghost
	var want, got extenderv1.ExtenderArgs
	if err := decodeArgsBytes(body, &want, nil); err != nil {
		t.Fatal(err)
	}
	r := nameResolver{cache: e.cache, snapPool: &e.srv.snapPool, idPool: &e.srv.idPool}
	if err := decodeArgsBytes(body, &got, &r); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("with a resolver the args differ (-without +with):\n%s", diff)
	}
	names := *got.NodeNames
	wantSnaps := e.cache.SnapshotInto(nil, names)
	snaps := r.cands.snaps
	if len(snaps) != 3 || snaps[0] != wantSnaps[0] || snaps[1] != wantSnaps[1] || snaps[2] != nil || snaps[0] == nil || snaps[1] == nil {
		t.Fatalf("snapshots %v, want %v", snaps, wantSnaps)
	}
	for i := 0; i < 2; i++ {
		if unsafe.StringData(names[i]) != unsafe.StringData(snaps[i].Name) {
			t.Errorf("name %q is not the snapshot's own string", names[i])
		}
		if r.cands.ids[i] != snaps[i].ID {
			t.Errorf("%s: ID %d, the snapshot's is %d", names[i], r.cands.ids[i], snaps[i].ID)
		}
	}
	for i := range body {
		body[i] = 'x'
	}
	if names[0] != "n1" || names[1] != "node-2.example.com" || names[2] != "ghost" {
		t.Errorf("after the body was overwritten the names read %q: they refer to it", names)
	}
}

// BenchmarkDecodeArgs: a filter body of 5,000 node names, decoded and the
// names' snapshots read from a cache of those nodes. resolved: as the
// handlers do it (names resolved while parsed); copied: the names copied out
// of the body, then looked up (SnapshotInto), as before the resolver.
func BenchmarkDecodeArgs(b *testing.B) {
	c := cache.New()
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		c.SetNode(fixture.MakeNode(names[i]).Cards(8, 80).Obj())
	}
	body := []byte(mustJSON(b, extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}))
	srv := &Server{cache: c}
	for _, resolved := range []bool{true, false} {
		name := "names=copied"
		if resolved {
			name = "names=resolved"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var args extenderv1.ExtenderArgs
				if resolved {
					r := nameResolver{cache: c, snapPool: &srv.snapPool, idPool: &srv.idPool}
					if err := decodeArgsBytes(body, &args, &r); err != nil || len(r.cands.snaps) != len(names) {
						b.Fatalf("decode: %v, %d snapshots", err, len(r.cands.snaps))
					}
					srv.putCandidates(r.cands)
				} else {
					if err := decodeArgsBytes(body, &args, nil); err != nil {
						b.Fatal(err)
					}
					srv.snapPool.put(c.SnapshotInto(srv.snapPool.get(len(names)), *args.NodeNames))
				}
				releaseNames(&args)
			}
		})
	}
}
