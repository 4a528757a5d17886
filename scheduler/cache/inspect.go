package cache

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// NodeInfo is one node as GET /inspect shows it.
type NodeInfo struct {
	Name string `json:"name"`
	// Unit is the unit of Capacity and Used.
	Unit api.MemoryUnit `json:"unit,omitempty"`
	// InventoryError says why the node's cards are unusable, if they are.
	InventoryError string     `json:"inventoryError,omitempty"`
	Cards          []CardInfo `json:"cards"`
	// Unplaced lists pods whose assignment names a card the node's
	// inventory does not have (e.g. the node was removed).
	Unplaced []PodUnits `json:"unplaced,omitempty"`
}

// CardInfo is one card of a NodeInfo.
type CardInfo struct {
	Index    int           `json:"index"`
	UUID     string        `json:"uuid"`
	Model    string        `json:"model,omitempty"`
	State    api.CardState `json:"state"`
	Capacity int64         `json:"capacity"`
	Used     int64         `json:"used"`
	Pods     []PodUnits    `json:"pods"`
}

// PodUnits is one container's share of a card.
type PodUnits struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Container string    `json:"container"`
	Units     int64     `json:"units"`
	// State is assumed (bind in flight) or confirmed (seen by the informer).
	State State `json:"state"`
	// Phase is the assignment's phase: Assigned or Allocated.
	Phase api.AssignmentPhase `json:"phase"`
}

// Inspect returns the named nodes (all known nodes when none are named),
// sorted by name, with per-card capacity, used units and pods. Unknown names
// are left out.
func (c *Cache) Inspect(names ...string) []NodeInfo {
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
	out := make([]NodeInfo, 0, len(states))
	for _, n := range states {
		out = append(out, n.info())
	}
	return out
}

func (n *nodeState) info() NodeInfo {
	ni := NodeInfo{Name: n.name, Unit: n.snap.Unit, Cards: []CardInfo{}}
	if n.snap.InventoryErr != nil {
		ni.InventoryError = n.snap.InventoryErr.Error()
	}
	pos := map[string]int{}
	for i, c := range n.snap.Cards {
		ni.Cards = append(ni.Cards, CardInfo{Index: c.Index, UUID: c.UUID, Model: c.Model, State: c.State, Capacity: c.Capacity, Used: c.Used, Pods: []PodUnits{}})
		pos[c.UUID] = i
	}
	for _, p := range n.pods {
		for _, ca := range p.assignment.Containers {
			pu := PodUnits{Namespace: p.namespace, Name: p.name, UID: p.uid, Container: ca.Name, Units: ca.Units, State: p.state, Phase: p.assignment.Phase}
			if i, ok := pos[ca.CardUUID]; ok {
				ni.Cards[i].Pods = append(ni.Cards[i].Pods, pu)
			} else {
				ni.Unplaced = append(ni.Unplaced, pu)
			}
		}
	}
	less := func(ps []PodUnits) func(a, b int) bool {
		return func(a, b int) bool {
			if ps[a].Namespace != ps[b].Namespace {
				return ps[a].Namespace < ps[b].Namespace
			}
			if ps[a].Name != ps[b].Name {
				return ps[a].Name < ps[b].Name
			}
			return ps[a].Container < ps[b].Container
		}
	}
	for i := range ni.Cards {
		sort.Slice(ni.Cards[i].Pods, less(ni.Cards[i].Pods))
	}
	sort.Slice(ni.Unplaced, less(ni.Unplaced))
	return ni
}

// CardUsage is one card's figures for the metrics collector.
type CardUsage struct {
	Node     string
	Index    int
	UUID     string
	Capacity int64
	Used     int64
}

// EachCard calls f for every card of every known node, under the read lock:
// f must be quick and must not call back into the cache.
func (c *Cache) EachCard(f func(CardUsage)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, n := range c.nodes {
		if !n.known {
			continue
		}
		for _, card := range n.snap.Cards {
			f(CardUsage{Node: n.name, Index: card.Index, UUID: card.UUID, Capacity: card.Capacity, Used: card.Used})
		}
	}
}
