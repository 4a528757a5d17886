package cache

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// Resident is a pod that holds units on a node's cards, as the preempt verb
// reads it.
type Resident struct {
	UID       types.UID
	Namespace string
	Name      string
	// Grants are the units it holds, by card Index (a Whole grant holds the
	// card whole).
	Grants []allocator.Grant
	// State is how the cache knows of it: only a Confirmed pod is bound as
	// kube-scheduler sees it.
	State State
}

// Residents returns the pods that hold units on the named node's cards, and
// the snapshot their grants are counted in (nil for a node the cache does
// not know). Pods without units on a card (CPU-only pods) are left out.
func (c *Cache) Residents(node string) ([]Resident, *allocator.Node) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[node]
	if !ok || !n.known || n.snap == nil {
		return nil, nil
	}
	index := make(map[string]int, len(n.snap.Cards))
	for _, card := range n.snap.Cards {
		index[card.UUID] = card.Index
	}
	out := make([]Resident, 0, len(n.pods))
	for _, p := range n.pods {
		r := Resident{UID: p.uid, Namespace: p.namespace, Name: p.name, State: p.state}
		for _, ca := range p.assignment.Containers {
			if i, ok := index[ca.CardUUID]; ok {
				r.Grants = append(r.Grants, allocator.Grant{Card: i, Units: ca.Units})
			}
		}
		for _, u := range p.assignment.WholeCardUUIDs() {
			if i, ok := index[u]; ok {
				r.Grants = append(r.Grants, allocator.Grant{Card: i, Whole: true})
			}
		}
		if len(r.Grants) > 0 {
			out = append(out, r)
		}
	}
	return out, n.snap
}
