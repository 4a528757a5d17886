package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
)

const a100 = "NVIDIA A100-SXM4-40GB"

// share is the DRAShare dratest.Claim(ns, name).On(...) gives for its
// first result on device with memory, reserved for pods.
func share(ns, name, device, memory string, pods ...string) api.DRAShare {
	s := api.DRAShare{Namespace: ns, Name: name, UID: types.UID("claim-" + ns + "-" + name), Request: "gpu", Device: device, ShareID: "share-" + name + "-" + device + "-0", Pods: pods}
	if memory != "" {
		s.Memory = resource.MustParse(memory)
	}
	return s
}

func card(index int, node string, offered int64, claims ...api.DRAShare) api.DRACard {
	c := dratest.Card(node, index, a100, 40)
	return api.DRACard{Index: index, UUID: c.UUID, Model: a100, State: api.CardHealthy, Offered: offered, Claims: claims}
}

func TestDRAUsageReadsTheDriversSlicesAndClaims(t *testing.T) {
	n1 := func(cards ...api.Card) *dratest.SliceBuilder { return dratest.Slice("n1", api.UnitGiB, cards...) }
	c0, c1 := dratest.Card("n1", 0, a100, 40), dratest.Card("n1", 1, a100, 40)
	tests := []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		claims []*resourceapi.ResourceClaim
		want   map[string]*api.DRANode
	}{{
		name:   "two claims share one card, each with its memory and pod",
		slices: []*resourceapi.ResourceSlice{n1(c0, c1).Obj()},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ml", "twenty").On("n1", 0, "20Gi").ReservedFor("b").Obj(),
			dratest.Claim("ml", "ten").On("n1", 0, "10Gi").ReservedFor("a").Obj(),
		},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{
			card(0, "n1", 40, share("ml", "ten", "card-0", "10Gi", "a"), share("ml", "twenty", "card-0", "20Gi", "b")),
			card(1, "n1", 40),
		}}},
	}, {
		name:   "a claim reserved for no pod still holds its memory; an unallocated one holds none",
		slices: []*resourceapi.ResourceSlice{n1(c0).Obj()},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ml", "idle").On("n1", 0, "5Gi").Obj(),
			dratest.Claim("ml", "waiting").Obj(),
		},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{
			card(0, "n1", 40, share("ml", "idle", "card-0", "5Gi")),
		}}},
	}, {
		name: "other drivers' slices and allocation results are ignored",
		slices: []*resourceapi.ResourceSlice{
			n1(c0).Obj(),
			dratest.Slice("n2", api.UnitGiB, dratest.Card("n2", 0, a100, 40)).Driver("gpu.nvidia.com").Obj(),
		},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ml", "theirs").Result("gpu.nvidia.com", "n1", "card-0", "30Gi").Obj(),
			dratest.Claim("ml", "both").Result("gpu.nvidia.com", "n1", "gpu-0", "").On("n1", 0, "10Gi").Obj(),
		},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{
			card(0, "n1", 40, api.DRAShare{Namespace: "ml", Name: "both", UID: "claim-ml-both", Request: "gpu", Device: "card-0", Memory: resource.MustParse("10Gi"), ShareID: "share-both-card-0-1"}),
		}}},
	}, {
		name:   "a share of a card the slice does not list, or of a node without a slice, is unplaced",
		slices: []*resourceapi.ResourceSlice{n1(c0).Obj()},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ml", "gone-card").On("n1", 3, "10Gi").Obj(),
			dratest.Claim("ml", "gone-node").On("n9", 0, "10Gi").ReservedFor("p").Obj(),
		},
		want: map[string]*api.DRANode{
			"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{card(0, "n1", 40)},
				Unplaced: []api.DRAShare{share("ml", "gone-card", "card-3", "10Gi")}},
			"n9": {Name: "n9", Unplaced: []api.DRAShare{share("ml", "gone-node", "card-0", "10Gi", "p")}},
		},
	}, {
		name: "only the newest generation of a pool counts",
		slices: []*resourceapi.ResourceSlice{
			n1(dratest.Card("n1", 0, a100, 40)).Obj(),
			n1(dratest.Card("n1", 0, a100, 40), dratest.Card("n1", 1, a100, 40)).Generation(2).Obj(),
		},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{card(0, "n1", 40), card(1, "n1", 40)}}},
	}, {
		name:   "memory device-plugin pods hold is not offered; tainted cards are unhealthy or isolated",
		slices: []*resourceapi.ResourceSlice{dratest.SliceHolding("n1", api.UnitGiB, map[int]int64{0: 10}, c0, withState(c1, api.CardUnhealthy, "XID 79"), withState(dratest.Card("n1", 2, a100, 40), api.CardIsolated, "")).Obj()},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB, Cards: []api.DRACard{
			card(0, "n1", 30),
			withDRAState(card(1, "n1", 40), api.CardUnhealthy, "XID-79"),
			withDRAState(card(2, "n1", 40), api.CardIsolated, ""),
		}}},
	}, {
		name:   "a result without consumed memory was given the device whole: it consumes all the card offers",
		slices: []*resourceapi.ResourceSlice{dratest.SliceHolding("n1", api.UnitGiB, map[int]int64{0: 10}, c0).Obj()},
		claims: []*resourceapi.ResourceClaim{
			dratest.Claim("ml", "whole").On("n1", 0, "").Obj(),
			dratest.Claim("ml", "gone").On("n1", 3, "").Obj(),
		},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitGiB,
			Cards:    []api.DRACard{card(0, "n1", 30, share("ml", "whole", "card-0", "30Gi"))},
			Unplaced: []api.DRAShare{share("ml", "gone", "card-3", "")}}},
	}, {
		name:   "a slice in MiB is read in MiB",
		slices: []*resourceapi.ResourceSlice{dratest.Slice("n1", api.UnitMiB, dratest.Card("n1", 0, a100, 40960)).Obj()},
		claims: []*resourceapi.ResourceClaim{dratest.Claim("ml", "small").On("n1", 0, "1536Mi").Obj()},
		want: map[string]*api.DRANode{"n1": {Name: "n1", Sliced: true, Unit: api.UnitMiB, Cards: []api.DRACard{
			card(0, "n1", 40960, share("ml", "small", "card-0", "1536Mi")),
		}}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := api.DefaultNames().DRAUsage(tc.slices, tc.claims)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("DRAUsage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDRAShareUnitsRoundUpToWholeUnits(t *testing.T) {
	for _, tc := range []struct {
		memory string
		unit   api.MemoryUnit
		want   int64
	}{
		{"10Gi", api.UnitGiB, 10},
		{"1536Mi", api.UnitGiB, 2}, // 1.5 GiB takes 2 whole GiB
		{"1536Mi", api.UnitMiB, 1536},
		{"10Gi", api.UnitMiB, 10240},
	} {
		s := share("ml", "c", "card-0", tc.memory)
		if got := s.Units(tc.unit); got != tc.want {
			t.Errorf("%q in %s: %d units, want %d", tc.memory, tc.unit, got, tc.want)
		}
	}
}

func withState(c api.Card, state api.CardState, reason string) api.Card {
	c.State, c.Reason = state, reason
	return c
}

func withDRAState(c api.DRACard, state api.CardState, reason string) api.DRACard {
	c.State, c.Reason = state, reason
	return c
}
