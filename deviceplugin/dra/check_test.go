package dra

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/response"
)

// A writer of resourceclaims/status (not the scheduler) forges allocations;
// the driver prepares none of them, each refusal saying what is wrong.
func TestPrepareRefusesAllocationsTheNodeDidNotOffer(t *testing.T) {
	asks := func(c *resourceapi.ResourceClaim, memory string) *resourceapi.ResourceClaim {
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: resource.MustParse(memory)}}
		return c
	}
	renamed := claim("u", "team", result("gpu", "gpu-1", "card-0", "1Gi"))
	renamed.Spec.Devices.Requests[0].Name = "other"
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		wantErr string
	}{
		{name: "a card the node does not publish (held whole by device-plugin pods)", claim: claim("u", "team", result("gpu", "gpu-1", "card-1", "1Gi")), wantErr: "not a card of this node's pool"},
		{name: "a card of another node's pool", claim: claim("u", "team", result("gpu", "gpu-2", "card-0", "1Gi")), wantErr: "not a card of this node's pool"},
		{name: "more memory than the claim asks for", claim: asks(claim("u", "team", result("gpu", "gpu-1", "card-0", "40Gi")), "1Gi"), wantErr: "consumes 40Gi of memory where its request asks for 1Gi"},
		{name: "no memory consumed (the whole card)", claim: asks(claim("u", "team", result("gpu", "gpu-1", "card-0", "")), "1Gi"), wantErr: "consumes no memory"},
		{name: "a request the claim does not have", claim: renamed, wantErr: `names request "gpu", which the claim does not have`},
		{name: "more than the card offers", claim: claim("u", "team", result("gpu", "gpu-1", "card-0", "50Gi")), wantErr: "more than the card has"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Driver{Name: "gpushare.example.com", Pool: "gpu-1", Store: store(t), CDIDir: t.TempDir(),
				Grant: response.Config{Names: api.DefaultNames(), Strategy: response.StrategyEnvvar},
				Held:  func() map[int]int64 { return map[int]int64{1: 40} }}
			got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tt.claim})
			if err != nil {
				t.Fatal(err)
			}
			if e := got["u"].Err; e == nil || !strings.Contains(e.Error(), tt.wantErr) || len(got["u"].Devices) != 0 {
				t.Errorf("prepared %+v, want refused with %q", got["u"], tt.wantErr)
			}
		})
	}
}

// Two claims forged onto one 40 GiB card, 30 GiB each: the second is
// refused while the first is prepared, and prepared once the first is not.
func TestPrepareKeepsTheNodesClaimsWithinACard(t *testing.T) {
	d := &Driver{Name: "gpushare.example.com", Pool: "gpu-1", Store: store(t), CDIDir: t.TempDir(),
		Grant: response.Config{Names: api.DefaultNames(), Strategy: response.StrategyEnvvar}}
	prep := func(uid string) error {
		got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim(uid, "team", result("gpu", "gpu-1", "card-0", "30Gi"))})
		if err != nil {
			t.Fatal(err)
		}
		return got[types.UID(uid)].Err
	}
	if err := prep("a"); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := prep("a"); err != nil {
		t.Fatalf("the first claim prepared again (the kubelet retries): %v", err)
	}
	if err := prep("b"); err == nil || !strings.Contains(err.Error(), "prepared claims already hold 30Gi of the 40Gi") {
		t.Fatalf("second claim: %v, want refused", err)
	}
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := prep("b"); err != nil {
		t.Fatalf("second claim once the first is gone: %v", err)
	}
}
