package server

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// draUsage is a DRASource answering what the objects hold, or err.
type draUsage struct {
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim
	err    error
}

func (d draUsage) Usage() (map[string]*api.DRANode, error) {
	if d.err != nil {
		return nil, d.err
	}
	return api.DefaultNames().DRAUsage(d.slices, d.claims), nil
}

// /inspect shows a DRA node's cards from its slice with the claims on them,
// counted in Used; a device-plugin node is as before. When the DRA objects
// are not known, the answer says so in a Warning header and shows the rest.
func TestInspectShowsTheDRAClaimsOnTheirCards(t *testing.T) {
	usage := draUsage{
		slices: []*resourceapi.ResourceSlice{dratest.Slice("d1", api.UnitGiB, dratest.Card("d1", 0, "A100", 40)).Obj()},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ns", "ten").On("d1", 0, "10Gi").ReservedFor("p").Obj(),
			dratest.Claim("ns", "idle").On("d1", 0, "5Gi").Obj(),
			dratest.Claim("ns", "theirs").Result("gpu.nvidia.com", "d1", "card-0", "20Gi").Obj(),
		},
	}
	nodes := []*corev1.Node{fixture.MakeNode("n1").Card(0, 40).Obj(), fixture.MakeNode("d1").NoGPU().Obj()}
	claim := func(name, memory string, units int64, pods ...string) api.ExtenderClaim {
		return api.ExtenderClaim{Namespace: "ns", Name: name, UID: types.UID("claim-ns-" + name), Request: "gpu", Device: "card-0", Memory: resource.MustParse(memory), Units: units,
			ShareID: "share-" + name + "-card-0-0", Pods: append([]string{}, pods...)}
	}
	wantD1 := api.ExtenderNode{Name: "d1", Unit: api.UnitGiB, DRA: true, Cards: []api.ExtenderCard{{
		Index: 0, UUID: podtest.CardUUID("d1", 0), Model: "A100", State: api.CardHealthy, Capacity: 40, Used: 15, Claimed: 15,
		Pods: []api.ExtenderPod{}, Claims: []api.ExtenderClaim{claim("idle", "5Gi", 5), claim("ten", "10Gi", 10, "p")},
	}}}
	quantity := cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

	h := newEnv(t, envOpts{draUsage: usage}, nodes).srv.Handler(nil)
	rec := do(t, h, "GET", "/inspect/d1", "")
	var got api.ExtenderNode
	if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != 200 || err != nil {
		t.Fatalf("inspect d1: %d %v %s", rec.Code, err, rec.Body)
	}
	if diff := cmp.Diff(wantD1, got, quantity); diff != "" {
		t.Errorf("inspect d1 (-want +got):\n%s", diff)
	}
	if w := rec.Header().Get("Warning"); w != "" {
		t.Errorf("Warning %q with the DRA objects known", w)
	}
	rec = do(t, h, "GET", "/inspect/n1", "")
	var n1 api.ExtenderNode
	if err := json.Unmarshal(rec.Body.Bytes(), &n1); err != nil || n1.DRA || n1.Cards[0].Used != 0 || len(n1.Cards[0].Claims) != 0 {
		t.Errorf("device-plugin node n1: %+v (%v), want no DRA", n1, err)
	}

	h = newEnv(t, envOpts{draUsage: draUsage{err: errors.New("not synced")}}, nodes).srv.Handler(nil)
	rec = do(t, h, "GET", "/inspect", "")
	var all []api.ExtenderNode
	if err := json.Unmarshal(rec.Body.Bytes(), &all); rec.Code != 200 || err != nil || len(all) != 2 || all[0].DRA {
		t.Fatalf("inspect without the DRA objects: %d %v %s", rec.Code, err, rec.Body)
	}
	if w, want := rec.Header().Get("Warning"), `299 - "DRAUnreadable: not synced"`; w != want {
		t.Errorf("Warning %q, want %q", w, want)
	}
}
