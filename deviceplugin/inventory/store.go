// Package inventory owns the device plugin's view of its node's cards: what
// NVML found, which cards failed a health check, which an operator isolated.
// From that one state it derives both the node GPU inventory the plugin
// publishes (api.Inventory) and the device list it sends the kubelet, and it
// tells watchers when either changes.
package inventory

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// Isolation sources: the node annotation and the isolation file are kept
// apart so that lifting one does not lift the other.
const (
	SourceAnnotation = "annotation"
	SourceFile       = "file"
)

// Store is the card state. Safe for concurrent use.
type Store struct {
	unit  api.MemoryUnit
	cards []nvml.Card

	mu        sync.Mutex
	unhealthy map[string]string // UUID → reason
	isolation map[string]api.Isolation
	changed   chan struct{}
	version   uint64
	usedMiB   map[string]int64 // UUID → memory in use; nil: not sampled
	// notServing is Inventory().NotServing (SetNotServing).
	notServing string
	// invChanged is closed at every change of Inventory(): card state (with
	// changed) or memory in use (alone: the kubelet's device list does not
	// change with it).
	invChanged chan struct{}
}

// New builds a Store over the discovered cards, all healthy and not isolated.
func New(unit api.MemoryUnit, cards []nvml.Card) (*Store, error) {
	if err := unit.Validate(); err != nil {
		return nil, err
	}
	cs := append([]nvml.Card(nil), cards...)
	sort.Slice(cs, func(a, b int) bool { return cs[a].Index < cs[b].Index })
	s := &Store{unit: unit, cards: cs, unhealthy: map[string]string{}, isolation: map[string]api.Isolation{}, changed: make(chan struct{}), invChanged: make(chan struct{})}
	if _, err := api.EncodeInventory(s.Inventory()); err != nil {
		return nil, fmt.Errorf("discovered cards do not form a valid inventory: %w", err)
	}
	return s, nil
}

// Unit is the memory unit the plugin advertises.
func (s *Store) Unit() api.MemoryUnit { return s.unit }

// Cards are the discovered cards, ordered by index.
func (s *Store) Cards() []nvml.Card { return append([]nvml.Card(nil), s.cards...) }

// Card returns the discovered card with this UUID.
func (s *Store) Card(uuid string) (nvml.Card, bool) {
	if i := slices.IndexFunc(s.cards, func(c nvml.Card) bool { return c.UUID == uuid }); i >= 0 {
		return s.cards[i], true
	}
	return nvml.Card{}, false
}

// Changed returns a channel closed at the next change of state.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Version counts changes of state.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *Store) notifyLocked() {
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	s.notifyInventoryLocked()
}

func (s *Store) notifyInventoryLocked() {
	close(s.invChanged)
	s.invChanged = make(chan struct{})
}

// InventoryChanged returns a channel closed at the next change of
// Inventory(): a change of card state (as Changed) or of memory in use.
func (s *Store) InventoryChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.invChanged
}

// SetUnhealthy marks the card unhealthy (an empty UUID: every card). It
// reports whether anything changed.
func (s *Store) SetUnhealthy(uuid, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, c := range s.cards {
		if uuid != "" && c.UUID != uuid {
			continue
		}
		if s.unhealthy[c.UUID] != reason {
			s.unhealthy[c.UUID] = reason
			changed = true
		}
	}
	if changed {
		s.notifyLocked()
	}
	return changed
}

// SetHealthy clears the card's health failure; it reports whether it had one.
func (s *Store) SetHealthy(uuid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.unhealthy[uuid]; !ok {
		return false
	}
	delete(s.unhealthy, uuid)
	s.notifyLocked()
	return true
}

// Unhealthy returns the UUIDs of cards with a health failure and the reasons.
func (s *Store) Unhealthy() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.unhealthy))
	for k, v := range s.unhealthy {
		out[k] = v
	}
	return out
}

// SetIsolation replaces what one source (SourceAnnotation, SourceFile)
// isolates; it reports whether the state changed.
func (s *Store) SetIsolation(source string, iso api.Isolation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.isolatedLocked()
	s.isolation[source] = iso
	after := s.isolatedLocked()
	if fmt.Sprint(before) == fmt.Sprint(after) {
		return false
	}
	s.notifyLocked()
	return true
}

// isolatedLocked maps isolated card UUIDs to the sources isolating them.
func (s *Store) isolatedLocked() map[string][]string {
	out := map[string][]string{}
	sources := make([]string, 0, len(s.isolation))
	for k := range s.isolation {
		sources = append(sources, k)
	}
	sort.Strings(sources)
	for _, c := range s.cards {
		for _, src := range sources {
			if s.isolation[src].Isolates(c.Index, c.UUID) {
				out[c.UUID] = append(out[c.UUID], src)
			}
		}
	}
	return out
}

// Inventory is the node GPU inventory to publish. A card both isolated and
// unhealthy shows as isolated (the operator's decision is the one to lift).
func (s *Store) Inventory() api.Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	iso := s.isolatedLocked()
	inv := api.Inventory{Version: api.InventoryVersion, Unit: s.unit, Cards: make([]api.Card, 0, len(s.cards)), NotServing: s.notServing}
	for _, c := range s.cards {
		card := api.Card{Index: c.Index, UUID: c.UUID, Model: c.Model, MemoryMiB: c.MemoryMiB, Units: s.unit.UnitsFromMiB(c.MemoryMiB), State: api.CardHealthy}
		if srcs, ok := iso[c.UUID]; ok {
			card.State = api.CardIsolated
			card.Reason = "isolated by the operator (" + strings.Join(srcs, ", ") + ")"
		} else if r, ok := s.unhealthy[c.UUID]; ok {
			card.State = api.CardUnhealthy
			card.Reason = r
		}
		if used, ok := s.usedMiB[c.UUID]; ok {
			card.UsedMiB = &used
		}
		inv.Cards = append(inv.Cards, card)
	}
	return inv
}

// SetUsed records the memory in use per card UUID (the memory sampler's
// figures, in MiB) for the inventory; a card absent from used drops its
// figure. It reports whether anything changed (and then wakes
// InventoryChanged, not Changed: the device list is the same).
func (s *Store) SetUsed(used map[string]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	same := s.usedMiB != nil && len(used) == len(s.usedMiB)
	for u, mib := range used {
		if old, ok := s.usedMiB[u]; !ok || old != mib {
			same = false
		}
	}
	if same {
		return false
	}
	s.usedMiB = make(map[string]int64, len(used))
	for u, mib := range used {
		s.usedMiB[u] = mib
	}
	s.notifyInventoryLocked()
	return true
}

// SetNotServing records api.Inventory.NotServing ("": serving) and reports whether it changed
// (waking InventoryChanged only: the device list is the same).
func (s *Store) SetNotServing(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notServing == reason {
		return false
	}
	s.notServing = reason
	s.notifyInventoryLocked()
	return true
}

// Devices is the device list for ListAndWatch: one device per unit, named
// api.UnitID(card UUID, n), Unhealthy when its card is not healthy.
func (s *Store) Devices() []*pluginapi.Device {
	inv := s.Inventory()
	var out []*pluginapi.Device
	for _, c := range inv.Cards {
		health := pluginapi.Healthy
		if !c.Schedulable() {
			health = pluginapi.Unhealthy
		}
		for n := int64(0); n < c.Units; n++ {
			out = append(out, &pluginapi.Device{ID: api.UnitID(c.UUID, n), Health: health})
		}
	}
	return out
}
