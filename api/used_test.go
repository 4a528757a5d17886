package api

import (
	"errors"
	"strings"
	"testing"
)

func TestInventoryUsedMiB(t *testing.T) {
	used, neg := int64(2048), int64(-1)
	inv := Inventory{Version: InventoryVersion, Unit: UnitGiB, Cards: []Card{
		{Index: 0, UUID: "GPU-a", MemoryMiB: 81920, Units: 80, State: CardHealthy, UsedMiB: &used},
		{Index: 1, UUID: "GPU-b", MemoryMiB: 81920, Units: 80, State: CardHealthy},
	}}
	s, err := EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `"usedMiB":2048`) || strings.Count(s, "usedMiB") != 1 {
		t.Errorf("encoded %s: want usedMiB on card 0 only (omitempty when not sampled)", s)
	}
	back, err := DecodeInventory(s)
	if err != nil || back.Cards[0].UsedMiB == nil || *back.Cards[0].UsedMiB != 2048 || back.Cards[1].UsedMiB != nil {
		t.Errorf("decoded %+v, %v", back, err)
	}
	inv.Cards[1].UsedMiB = &neg
	if _, err := EncodeInventory(inv); !errors.Is(err, ErrInvalidInventory) {
		t.Errorf("negative used: err = %v, want ErrInvalidInventory", err)
	}
}
