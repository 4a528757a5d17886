package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// The DRA reader knows nothing until its informers have listed, then
// follows the driver's slices and the claims as they change.
func TestDRAReadsTheDriversSlicesAndClaimsThroughInformers(t *testing.T) {
	client := fake.NewClientset(
		dratest.Slice("d1", api.UnitGiB, dratest.Card("d1", 0, "A100", 40)).Obj(),
		dratest.Claim("ns", "ten").On("d1", 0, "10Gi").ReservedFor("p").Obj(),
	)
	d := cache.NewDRA(client, api.DefaultNames(), 0)
	if _, err := d.Usage(); !errors.Is(err, cache.ErrDRANotSynced) {
		t.Fatalf("before its informers run: %v, want ErrDRANotSynced", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	claims := func() []string {
		u, err := d.Usage()
		if err != nil || u["d1"] == nil || len(u["d1"].Cards) != 1 {
			return nil
		}
		var out []string
		for _, s := range u["d1"].Cards[0].Claims {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		return out
	}
	eventually(t, "the claim on d1's card", func() bool { return cmp.Equal(claims(), []string{"ns/ten"}) })
	if _, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, dratest.Claim("ns", "idle").On("d1", 0, "5Gi").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new claim", func() bool { return cmp.Equal(claims(), []string{"ns/idle", "ns/ten"}) })
}

// AddDRA on the extender's nodes: a node whose cards the device plugin
// published keeps them and gets the claims; a DRA node's missing inventory
// is no error, a malformed isolation annotation still is; other nodes and
// the input are unchanged.
func TestAddDRAPutsTheClaimsOnTheExtendersCards(t *testing.T) {
	c := cache.New()
	c.SetNode(fixture.MakeNode("moved").Card(0, 40).Obj())
	c.SetNode(fixture.MakeNode("bare").NoInventory().Obj())
	c.SetNode(fixture.MakeNode("bad-iso").Card(0, 40).Annotation(api.DefaultNames().AnnotationIsolation(), "card-one").Obj())
	c.SetNode(fixture.MakeNode("plain").Card(0, 40).Obj())
	usage := api.DefaultNames().DRAUsage([]*resourceapi.ResourceSlice{
		dratest.SliceHolding("moved", api.UnitGiB, map[int]int64{0: 40}).Obj(),
		dratest.Slice("bare", api.UnitGiB, dratest.Card("bare", 0, "A100", 40)).Obj(),
		dratest.Slice("bad-iso", api.UnitGiB, dratest.Card("bad-iso", 0, "A100", 40)).Obj(),
	}, []*resourceapi.ResourceClaim{
		dratest.Claim("ns", "on-moved").On("moved", 0, "10Gi").Obj(),
		dratest.Claim("ns", "on-bare").On("bare", 0, "20Gi").Obj(),
	})
	in := c.Inspect()
	before := c.Inspect()
	out := cache.AddDRA(in, usage)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Errorf("AddDRA changed its input (-before +after):\n%s", diff)
	}
	type got struct {
		DRA              bool
		Err              api.InventoryErrorCode
		Used, Capacity   int64
		Claimed, NClaims int
	}
	gotOf := map[string]got{}
	for _, n := range out {
		g := got{DRA: n.DRA, Err: n.InventoryErrorCode}
		if len(n.Cards) > 0 {
			g.Used, g.Capacity, g.Claimed, g.NClaims = n.Cards[0].Used, n.Cards[0].Capacity, int(n.Cards[0].Claimed), len(n.Cards[0].Claims)
		}
		gotOf[n.Name] = g
	}
	want := map[string]got{
		"moved":   {DRA: true, Used: 10, Capacity: 40, Claimed: 10, NClaims: 1},
		"bare":    {DRA: true, Used: 20, Capacity: 40, Claimed: 20, NClaims: 1},
		"bad-iso": {DRA: true, Err: api.InventoryErrorIsolation, Capacity: 40},
		"plain":   {Capacity: 40},
	}
	if diff := cmp.Diff(want, gotOf); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}
