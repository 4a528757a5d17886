package cache

import (
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

func (c *Cache) node(name string) *nodeState {
	n, ok := c.nodes[name]
	if !ok {
		n = &nodeState{name: name, id: c.takeID(), pods: map[types.UID]*podState{}}
		c.nodes[name] = n
	}
	return n
}

// takeID returns a free node ID: the last one given back, else the next
// never given.
func (c *Cache) takeID() int32 {
	if k := len(c.freeIDs); k > 0 {
		id := c.freeIDs[k-1]
		c.freeIDs = c.freeIDs[:k-1]
		return id
	}
	c.nextID++
	return c.nextID - 1
}

// publish rebuilds n's snapshot and makes it the one Snapshot returns.
// Called with the write lock held.
func (c *Cache) publish(n *nodeState) {
	n.rebuild()
	if n.known {
		c.snaps[n.name] = snapRef{name: n.name, id: n.id, snap: n.snap}
	} else {
		delete(c.snaps, n.name)
	}
}

// gc drops a node entry that no informer object and no pod refer to.
func (c *Cache) gc(n *nodeState) {
	if !n.known && len(n.pods) == 0 && c.nodes[n.name] == n {
		delete(c.nodes, n.name)
		c.freeIDs = append(c.freeIDs, n.id)
	}
}

// SetNode records a node added or updated by the informer.
func (c *Cache) SetNode(node *corev1.Node) {
	if node == nil {
		return
	}
	inv, invErr := c.names.InventoryFromNode(node)
	_, gpuCap := node.Status.Capacity[c.names.ResourceName()]
	_, gpuAlloc := node.Status.Allocatable[c.names.ResourceName()]
	if _, ok := node.Status.Capacity[c.names.WholeResourceName()]; ok {
		gpuCap = true
	}
	var iso api.Isolation
	isoErr := error(nil)
	if s, ok := node.Annotations[c.names.AnnotationIsolation()]; ok {
		iso, isoErr = api.ParseIsolation(s)
	}

	host, hasHost := hostAllocatable(node)
	defer c.setNodeKey(node) // after the node's state: it may read pods again

	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(node.Name)
	before := n.pluginErr()
	n.known = true
	n.inv, n.invErr, n.invCode, n.iso = inv, nil, "", iso
	n.alloc, n.hasAlloc = host, hasHost
	n.kubeletBare = kubeletBare(node, c.names.ResourceName()) && len(inv.Cards) > 0
	n.notServing = ""
	if len(inv.Cards) > 0 {
		n.notServing = inv.NotServing
	}
	c.setModels(n, modelsOf(inv))
	switch {
	case invErr == nil && isoErr != nil:
		n.invErr, n.invCode = fmt.Errorf("node %s: %w", node.Name, isoErr), api.InventoryErrorIsolation
	case invErr != nil && (gpuCap || gpuAlloc || !errors.Is(invErr, api.ErrNoInventory)):
		// A node that offers gpu-mem (or carries a broken inventory) but whose
		// inventory cannot be read is filtered with the reason.
		n.invErr, n.invCode = invErr, api.InventoryErrorInvalid
		if errors.Is(invErr, api.ErrNoInventory) {
			n.invCode = api.InventoryErrorMissing
		}
	}
	c.publish(n)
	logPluginChange(n, before)
}

// DeleteNode records a node removed by the informer. Pods still assigned to
// it keep their entries until they are deleted too.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return
	}
	n.known = false
	n.inv, n.invErr, n.invCode, n.iso = api.Inventory{}, nil, "", api.Isolation{}
	n.hasAlloc, n.kubeletBare, n.notServing = false, false, ""
	c.setModels(n, nil)
	c.publish(n)
	c.gc(n)
}

// packedNode keeps a node's snapshot, its free CPU and memory and (up to
// 8) cards in one allocation, so that evaluating a node touches adjacent
// memory: at 5,000 nodes the filter's cost is mostly cache misses. The
// policies' fast paths read the node and its summary, the
// fragmentation-aware ones its free CPU and memory too, and no card.
type packedNode struct {
	node  allocator.Node
	host  allocator.HostResources
	cards [8]allocator.Card
}

// rebuild publishes a fresh immutable snapshot of the node. Called with the
// write lock held.
func (n *nodeState) rebuild() {
	var snap *allocator.Node
	var cards []allocator.Card
	var host *allocator.HostResources
	if k := len(n.inv.Cards); k <= len(packedNode{}.cards) {
		p := &packedNode{}
		snap, host, cards = &p.node, &p.host, p.cards[:k:k]
	} else {
		snap, host, cards = &allocator.Node{}, new(allocator.HostResources), make([]allocator.Card, k)
	}
	snap.Name, snap.ID, snap.Unit, snap.InventoryErr = n.name, n.id, n.inv.Unit, n.invErr
	if n.invErr == nil {
		// The cards stay in the snapshot (and /inspect); none fits.
		snap.InventoryErr = n.pluginErr()
	}
	if n.hasAlloc {
		free := n.alloc
		for _, p := range n.pods {
			free.CPUMilli -= p.host.CPUMilli
			free.MemoryMiB -= p.host.MemoryMiB
		}
		*host = allocator.HostResources{CPUMilli: max(free.CPUMilli, 0), MemoryMiB: max(free.MemoryMiB, 0)}
		snap.HostFree = host
	}
	if n.invErr == nil && len(n.inv.Cards) > 0 {
		used := make(map[string]int64, len(n.inv.Cards))
		var whole map[string]bool
		for _, p := range n.pods {
			for _, ca := range p.assignment.Containers {
				used[ca.CardUUID] += ca.Units
			}
			for _, w := range p.assignment.WholeCards {
				if whole == nil {
					whole = map[string]bool{}
				}
				for _, u := range w.CardUUIDs {
					whole[u] = true
				}
			}
		}
		for i, ic := range n.inv.Cards {
			ic = n.iso.Apply(ic)
			// A card given whole keeps Used at its shares (none, unless the
			// informer shows a conflict the plugins refused): Whole alone
			// takes it out of every decision (Card.Free, CanTakeWhole).
			cards[i] = allocator.Card{Index: ic.Index, UUID: ic.UUID, Model: ic.Model, Capacity: ic.Units, Used: used[ic.UUID], Whole: whole[ic.UUID], State: internState(ic.State)}
		}
		sort.Slice(cards, func(a, b int) bool { return cards[a].Index < cards[b].Index })
		snap.Cards = cards
	}
	// The snapshot is final from here on: never changed once published.
	snap.Summarize()
	n.snap = snap
}

// internState returns the package constant equal to s. The policy compares
// every card's state with api.CardHealthy on the hot path; a decoded string
// compares by content (a cache miss on its bytes), the constant by pointer.
func internState(s api.CardState) api.CardState {
	switch s {
	case api.CardHealthy:
		return api.CardHealthy
	case api.CardUnhealthy:
		return api.CardUnhealthy
	case api.CardIsolated:
		return api.CardIsolated
	}
	return s
}
