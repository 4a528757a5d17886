package api

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// InventoryVersion is the version of Inventory this package writes and reads.
const InventoryVersion = 1

// CardState says whether a card may take new pods.
type CardState string

const (
	// CardHealthy cards take new pods.
	CardHealthy CardState = "healthy"
	// CardUnhealthy cards failed a health check (e.g. a critical XID); they
	// take no new pods. Pods already on them are left alone.
	CardUnhealthy CardState = "unhealthy"
	// CardIsolated cards were isolated by an operator (AnnotationIsolation or
	// the device plugin's isolation file); they take no new pods.
	CardIsolated CardState = "isolated"
)

// Card is one GPU as the device plugin sees it.
type Card struct {
	// Index is the NVML index of the card on its node (0-based).
	Index int `json:"index"`
	// UUID is the NVML UUID, e.g. "GPU-8a2f…".
	UUID string `json:"uuid"`
	// Model is the NVML product name, e.g. "NVIDIA A100-SXM4-40GB".
	Model string `json:"model,omitempty"`
	// MemoryMiB is the card's total memory as NVML reports it.
	MemoryMiB int64 `json:"memoryMiB"`
	// Units is the capacity offered to pods: Inventory.Unit.UnitsFromMiB(MemoryMiB).
	Units int64 `json:"units"`
	// State is healthy, unhealthy or isolated.
	State CardState `json:"state"`
	// Reason says why a card is not healthy (e.g. "XID 79"); empty when healthy.
	Reason string `json:"reason,omitempty"`
	// UsedMiB is the GPU memory the processes on the card held at the
	// plugin's memory sample (the sum NVML reports per process, rounded up to
	// a whole MiB), refreshed at most once a minute so that the Node is not
	// rewritten at every sample. Absent (nil) when the plugin does not sample
	// memory; 0 is "nothing in use". Readers that predate it ignore it.
	UsedMiB *int64 `json:"usedMiB,omitempty"`
}

// Schedulable reports whether the card may take new pods.
func (c Card) Schedulable() bool { return c.State == CardHealthy }

// Inventory is a node's GPU cards, published by its device plugin in
// AnnotationInventory.
type Inventory struct {
	Version int        `json:"version"`
	Unit    MemoryUnit `json:"unit"`
	Cards   []Card     `json:"cards"`
	// NotServing says why the kubelet streams from the publishing plugin no longer (down,
	// restarting, not registered yet): the extender places no GPU pod there (ErrPluginNotServing).
	NotServing string `json:"notServing,omitempty"`
}

// ErrNoInventory is returned (wrapped) by InventoryFromNode when the node has
// no inventory annotation.
var ErrNoInventory = errors.New("node has no inventory annotation (is the gpushare device plugin running on it?)")

// ErrInvalidInventory is returned (wrapped) for an inventory that does not
// decode or validate.
var ErrInvalidInventory = errors.New("invalid GPU inventory")

// ErrPluginNotServing: the node's kubelet would fail a GPU pod at admission, so the extender
// places none there: the device plugin's pods (--device-plugin-selector) are none Ready, the
// kubelet reports gpu-mem capacity 0 (restarted, the plugin not registered again), or the
// inventory says the kubelet streams from the plugin no longer (Inventory.NotServing).
var ErrPluginNotServing = errors.New("the node's gpushare device plugin is not serving")

// Validate checks the inventory's internal consistency.
func (inv Inventory) Validate() error {
	if inv.Version != InventoryVersion {
		return fmt.Errorf("%w: version %d, this program reads version %d", ErrInvalidInventory, inv.Version, InventoryVersion)
	}
	if err := inv.Unit.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInventory, err)
	}
	indexes := map[int]bool{}
	uuids := map[string]bool{}
	for i, c := range inv.Cards {
		switch {
		case c.Index < 0:
			return fmt.Errorf("%w: card %d has negative index %d", ErrInvalidInventory, i, c.Index)
		case indexes[c.Index]:
			return fmt.Errorf("%w: card index %d appears twice", ErrInvalidInventory, c.Index)
		case c.UUID == "":
			return fmt.Errorf("%w: card %d has no UUID", ErrInvalidInventory, c.Index)
		case uuids[c.UUID]:
			return fmt.Errorf("%w: card UUID %s appears twice", ErrInvalidInventory, c.UUID)
		case c.Units < 0 || c.Units > MaxUnits:
			return fmt.Errorf("%w: card %d has %d units, want 0..%d", ErrInvalidInventory, c.Index, c.Units, MaxUnits)
		case c.MemoryMiB < 0:
			return fmt.Errorf("%w: card %d has negative memory", ErrInvalidInventory, c.Index)
		case c.UsedMiB != nil && *c.UsedMiB < 0:
			return fmt.Errorf("%w: card %d has negative used memory", ErrInvalidInventory, c.Index)
		}
		switch c.State {
		case CardHealthy, CardUnhealthy, CardIsolated:
		default:
			return fmt.Errorf("%w: card %d has unknown state %q", ErrInvalidInventory, c.Index, c.State)
		}
		indexes[c.Index] = true
		uuids[c.UUID] = true
	}
	return nil
}

// Card returns the card with the given index.
func (inv Inventory) Card(index int) (Card, bool) {
	return first(inv.Cards, func(c Card) bool { return c.Index == index })
}

// CardByUUID returns the card with the given UUID.
func (inv Inventory) CardByUUID(uuid string) (Card, bool) {
	return first(inv.Cards, func(c Card) bool { return c.UUID == uuid })
}

// TotalUnits is the sum of all cards' units, whatever their state.
func (inv Inventory) TotalUnits() int64 {
	var t int64
	for _, c := range inv.Cards {
		t += c.Units
	}
	return t
}

// EncodeInventory validates inv and returns its annotation value.
func EncodeInventory(inv Inventory) (string, error) { return encodeRecord(inv, ErrInvalidInventory) }

// DecodeInventory parses and validates an annotation value.
func DecodeInventory(s string) (Inventory, error) {
	return decodeRecord[Inventory](s, ErrInvalidInventory)
}

// InventoryFromNode decodes the node's inventory annotation
// (n.AnnotationInventory). A node without one gives ErrNoInventory; a
// malformed one ErrInvalidInventory.
func (n Names) InventoryFromNode(node *corev1.Node) (Inventory, error) {
	if node == nil {
		return Inventory{}, ErrNoInventory
	}
	inv, err := annotationRecord(node.Annotations, n.AnnotationInventory(), DecodeInventory, func() error {
		return missingKey(ErrNoInventory, "node has no "+n.AnnotationInventory()+" annotation (is the gpushare device plugin running on it?)")
	})
	if err != nil {
		return Inventory{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return inv, nil
}
