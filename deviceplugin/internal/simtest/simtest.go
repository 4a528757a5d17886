// Package simtest sets up simulated cards for the node agent's tests: the
// NVML simulator, the inventory store over its cards, and the cards as pod
// assignments name them.
package simtest

import (
	"testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/podtest"
)

// Node is a node's simulated cards.
type Node struct {
	// GPUs is NVML over the simulator; Sim the simulator itself.
	GPUs nvml.Interface
	Sim  *nvml.Simulator
	// Store is the inventory in GiB units.
	Store *inventory.Store
	// Cards are the cards as assignments name them, by index.
	Cards []podtest.Card
}

// New opens the simulated cards of spec (the --nvml flag's "spec:…", e.g.
// "spec:2x8GiB:Test-GPU"), their UUIDs seeded by node, and the inventory
// over them; any error fails t.
func New(t testing.TB, node, spec string) Node {
	t.Helper()
	src, err := nvml.ParseSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	gpus, sim, err := nvml.OpenSource(src, node, nvml.Options{WaitTimeoutMs: 20})
	if err != nil {
		t.Fatal(err)
	}
	cards, err := gpus.Cards()
	if err != nil {
		t.Fatal(err)
	}
	store, err := inventory.New(api.UnitGiB, cards)
	if err != nil {
		t.Fatal(err)
	}
	n := Node{GPUs: gpus, Sim: sim, Store: store}
	for i := range cards {
		n.Cards = append(n.Cards, podtest.Card{UUID: sim.UUID(i), Index: i})
	}
	return n
}
