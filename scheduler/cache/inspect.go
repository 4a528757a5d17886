package cache

import (
	"cmp"
	"slices"
	"sort"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// Inspect returns, as the contract's api.ExtenderNode, the named nodes (all known nodes when none are named),
// sorted by name, with per-card capacity, used units and pods. Unknown names
// are left out.
func (c *Cache) Inspect(names ...string) []api.ExtenderNode {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var states []*nodeState
	if len(names) == 0 {
		for _, n := range c.nodes {
			if n.known {
				states = append(states, n)
			}
		}
	} else {
		for _, name := range names {
			if n, ok := c.nodes[name]; ok && n.known {
				states = append(states, n)
			}
		}
	}
	sort.Slice(states, func(a, b int) bool { return states[a].name < states[b].name })
	out := make([]api.ExtenderNode, 0, len(states))
	for _, n := range states {
		out = append(out, n.info())
	}
	return out
}

func (n *nodeState) info() api.ExtenderNode {
	ni := api.ExtenderNode{Name: n.name, Unit: n.snap.Unit, Cards: []api.ExtenderCard{}}
	if n.snap.InventoryErr != nil {
		ni.InventoryError, ni.InventoryErrorCode = n.snap.InventoryErr.Error(), n.invCode
		if n.invErr == nil {
			ni.InventoryErrorCode = api.InventoryErrorPluginNotServing
		}
	}
	reason := map[string]string{}
	for _, ic := range n.inv.Cards {
		if r := n.iso.Apply(ic).Reason; r != "" {
			reason[ic.UUID] = r
		}
	}
	pos := map[string]int{}
	for i, c := range n.snap.Cards {
		used := c.Used
		if c.Whole {
			used = c.Capacity
		}
		ni.Cards = append(ni.Cards, api.ExtenderCard{Index: c.Index, UUID: c.UUID, Model: c.Model, State: c.State, Reason: reason[c.UUID],
			Capacity: c.Capacity, Used: used, Whole: c.Whole, Pods: []api.ExtenderPod{}})
		pos[c.UUID] = i
	}
	for _, p := range n.pods {
		for _, ca := range p.assignment.Containers {
			pu := api.ExtenderPod{Namespace: p.namespace, Name: p.name, UID: p.uid, Container: ca.Name, Units: ca.Units, State: p.state, Phase: p.assignment.Phase}
			if i, ok := pos[ca.CardUUID]; ok {
				ni.Cards[i].Pods = append(ni.Cards[i].Pods, pu)
			} else {
				pu.CardUUID = ca.CardUUID
				ni.Unplaced = append(ni.Unplaced, pu)
			}
		}
		for _, w := range p.assignment.WholeCards {
			for _, uuid := range w.CardUUIDs {
				pu := api.ExtenderPod{Namespace: p.namespace, Name: p.name, UID: p.uid, Container: w.Name, Whole: true, State: p.state, Phase: p.assignment.Phase}
				if i, ok := pos[uuid]; ok {
					pu.Units = ni.Cards[i].Capacity
					ni.Cards[i].Pods = append(ni.Cards[i].Pods, pu)
				} else {
					pu.CardUUID = uuid
					ni.Unplaced = append(ni.Unplaced, pu)
				}
			}
		}
	}
	byPod := func(a, b api.ExtenderPod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Container, b.Container))
	}
	for i := range ni.Cards {
		slices.SortFunc(ni.Cards[i].Pods, byPod)
	}
	slices.SortFunc(ni.Unplaced, byPod)
	return ni
}

// Nodes returns the published views of every known node, in no order; like
// Snapshot's, they are immutable and may be kept.
func (c *Cache) Nodes() []*allocator.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*allocator.Node, 0, len(c.snaps))
	for _, ref := range c.snaps {
		out = append(out, ref.snap)
	}
	return out
}
