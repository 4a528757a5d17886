package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCardLimitsFromNodes(t *testing.T) {
	node := func(name string, unit MemoryUnit, cards ...Card) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for i := range cards {
			cards[i].Index, cards[i].UUID = i, name+"-GPU-"+string(rune('a'+i))
			if cards[i].State == "" {
				cards[i].State = CardHealthy
			}
			cards[i].MemoryMiB = cards[i].Units * unit.MiB()
		}
		s, err := EncodeInventory(Inventory{Version: InventoryVersion, Unit: unit, Cards: cards})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations = map[string]string{DefaultNames().AnnotationInventory(): s}
		return n
	}
	broken := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "broken", Annotations: map[string]string{DefaultNames().AnnotationInventory(): `{"version":1,"unit":"GiB","cards":[{"index":0,"uuid":"x","units":999}]}`}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-only"}}
	tests := []struct {
		name  string
		nodes []*corev1.Node
		want  CardLimits
		data  map[string]string
	}{
		{name: "no GPU node: nothing known, no data", nodes: []*corev1.Node{plain}, data: map[string]string{}},
		{
			name:  "largest card across nodes, unhealthy and isolated cards count",
			nodes: []*corev1.Node{node("a", UnitGiB, Card{Units: 23, Model: "A10"}), node("b", UnitGiB, Card{Units: 79, Model: "H100", State: CardIsolated}, Card{Units: 39, Model: "A100"}), plain},
			want:  CardLimits{MaxUnits: 79, Unit: "GiB", Model: "H100"},
			data:  map[string]string{CardLimitsKeyMaxUnits: "79", CardLimitsKeyUnit: "GiB", CardLimitsKeyModel: "H100"},
		},
		{
			name:  "an invalid inventory is not trusted for the bound",
			nodes: []*corev1.Node{broken, node("a", UnitGiB, Card{Units: 15, Model: "T4"})},
			want:  CardLimits{MaxUnits: 15, Unit: "GiB", Model: "T4"},
			data:  map[string]string{CardLimitsKeyMaxUnits: "15", CardLimitsKeyUnit: "GiB", CardLimitsKeyModel: "T4"},
		},
		{
			name:  "nodes in different units: the largest number, unit mixed",
			nodes: []*corev1.Node{node("a", UnitGiB, Card{Units: 79, Model: "H100"}), node("b", UnitMiB, Card{Units: 15360, Model: "T4"})},
			want:  CardLimits{MaxUnits: 15360, Unit: "mixed", Model: "T4"},
			data:  map[string]string{CardLimitsKeyMaxUnits: "15360", CardLimitsKeyUnit: "mixed", CardLimitsKeyModel: "T4"},
		},
		{
			name:  "ties pick one model deterministically",
			nodes: []*corev1.Node{node("a", UnitGiB, Card{Units: 79, Model: "H100"}), node("b", UnitGiB, Card{Units: 79, Model: "A100-80GB"})},
			want:  CardLimits{MaxUnits: 79, Unit: "GiB", Model: "A100-80GB"},
			data:  map[string]string{CardLimitsKeyMaxUnits: "79", CardLimitsKeyUnit: "GiB", CardLimitsKeyModel: "A100-80GB"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultNames().CardLimitsFromNodes(tt.nodes)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CardLimitsFromNodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.data, got.Data()); diff != "" {
				t.Errorf("Data (-want +got):\n%s", diff)
			}
		})
	}
}
