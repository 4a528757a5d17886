package inventory

import (
	"testing"

	"github.com/gpushare/gpushare/api"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestSetUsedReachesTheInventoryNotTheDeviceList(t *testing.T) {
	s, err := New(api.UnitGiB, mixed)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Inventory().Cards {
		if c.UsedMiB != nil {
			t.Fatalf("card %d has used %d before any sample, want absent", c.Index, *c.UsedMiB)
		}
	}
	devices, inv := s.Changed(), s.InventoryChanged()
	if !s.SetUsed(map[string]int64{uuid0: 1024, uuid1: 0}) {
		t.Fatal("SetUsed reported no change")
	}
	if closed(devices) {
		t.Error("a change of memory in use woke Changed (the kubelet's device list)")
	}
	if !closed(inv) {
		t.Error("a change of memory in use did not wake InventoryChanged")
	}
	got := map[string]int64{}
	for _, c := range s.Inventory().Cards {
		if c.UsedMiB == nil {
			t.Fatalf("card %d: used absent after SetUsed", c.Index)
		}
		got[c.UUID] = *c.UsedMiB
	}
	if got[uuid0] != 1024 || got[uuid1] != 0 {
		t.Errorf("used = %v", got)
	}
	if _, err := api.EncodeInventory(s.Inventory()); err != nil {
		t.Errorf("inventory with used memory does not encode: %v", err)
	}
	inv = s.InventoryChanged()
	if s.SetUsed(map[string]int64{uuid0: 1024, uuid1: 0}) || closed(inv) {
		t.Error("the same figures again counted as a change")
	}
	if !s.SetUnhealthy(uuid0, "XID 79") || !closed(inv) {
		t.Error("a change of card state did not wake InventoryChanged")
	}
}
