package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIsolationApply(t *testing.T) {
	iso, err := ParseIsolation("1,GPU-c")
	if err != nil {
		t.Fatal(err)
	}
	healthy := func(index int, uuid string) Card {
		return Card{Index: index, UUID: uuid, Units: 40, State: CardHealthy}
	}
	tests := []struct {
		name string
		card Card
		want Card
	}{
		{"a healthy card the annotation does not name is as the inventory says", healthy(0, "GPU-a"), healthy(0, "GPU-a")},
		{"a healthy card named by index is isolated at once, with the reason",
			healthy(1, "GPU-b"), Card{Index: 1, UUID: "GPU-b", Units: 40, State: CardIsolated, Reason: ReasonIsolatedByAnnotation}},
		{"a healthy card named by UUID (any case) is isolated",
			healthy(2, "gpu-C"), Card{Index: 2, UUID: "gpu-C", Units: 40, State: CardIsolated, Reason: ReasonIsolatedByAnnotation}},
		{"an unhealthy card stays unhealthy with its reason",
			Card{Index: 1, UUID: "GPU-b", Units: 40, State: CardUnhealthy, Reason: "XID 79"}, Card{Index: 1, UUID: "GPU-b", Units: 40, State: CardUnhealthy, Reason: "XID 79"}},
		{"a card the plugin already isolated keeps the plugin's reason",
			Card{Index: 1, UUID: "GPU-b", Units: 40, State: CardIsolated, Reason: "isolation file"}, Card{Index: 1, UUID: "GPU-b", Units: 40, State: CardIsolated, Reason: "isolation file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, iso.Apply(tc.card)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
