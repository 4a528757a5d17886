package cache

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// Offer records what the preempt verb found for pod on each node it
// returned (node name to the assignment the freed cards would take),
// replacing an earlier offer. kube-scheduler picks one of those nodes and
// writes it as the pod's status.nominatedNodeName; when the informer shows
// it (SetPod), the offer for that node becomes the pod's promise
// (see Offer). An offer ends with the pod, its binding, or the assume TTL.
func (c *Cache) Offer(pod *corev1.Pod, offers map[string]api.Assignment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offers == nil {
		c.offers = map[types.UID]offer{}
	}
	c.offers[pod.UID] = offer{byNode: offers, deadline: c.clock.Now().Add(c.assumeTTL)}
	if pod.Status.NominatedNodeName != "" {
		c.takeOfferLocked(pod)
	}
}

// offer is the preempt verb's last answer for one pod.
type offer struct {
	byNode   map[string]api.Assignment
	deadline time.Time
}

// takeOfferLocked turns the pod's offer for its nominated node into its
// promise. Called with the write lock held.
func (c *Cache) takeOfferLocked(pod *corev1.Pod) {
	o, ok := c.offers[pod.UID]
	if !ok {
		return
	}
	a, ok := o.byNode[pod.Status.NominatedNodeName]
	if !ok {
		return
	}
	delete(c.offers, pod.UID)
	if old, ok := c.pods[pod.UID]; ok {
		if old.state != Nominated {
			return
		}
		c.remove(old)
	}
	if n, ok := c.nodes[a.Node]; !ok || !n.known {
		return
	}
	c.add(&podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: a.Node, assignment: a, state: Nominated,
		bindDone: true, deadline: c.clock.Now().Add(c.assumeTTL)})
}

// NominatedView returns, for a pod with a promise (see Offer), the node
// promised, the node's snapshot without the promised units (the pod's own
// view: everyone else's counts them) and the promised assignment. ok is
// false for any other pod.
func (c *Cache) NominatedView(uid types.UID) (node string, view *allocator.Node, a api.Assignment, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, found := c.pods[uid]
	if !found || p.state != Nominated || p.view == nil {
		return "", nil, api.Assignment{}, false
	}
	return p.node, p.view, p.assignment, true
}

// Holder is a pod that holds units on a node's cards, for the preempt verb.
type Holder struct {
	UID             types.UID
	Namespace, Name string
	// Grants are its units per card (Grant.Card is the card's Index).
	Grants []allocator.Grant
}

// Holders returns the node's snapshot and the pods that hold units on its
// cards (bound or assumed; not promises), in no particular order.
func (c *Cache) Holders(node string) (*allocator.Node, []Holder, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[node]
	if !ok || !n.known {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnknownNode, node)
	}
	index := make(map[string]int, len(n.inv.Cards))
	for _, ic := range n.inv.Cards {
		index[ic.UUID] = ic.Index
	}
	var out []Holder
	for _, p := range n.pods {
		if p.state == Nominated || (len(p.assignment.Containers) == 0 && len(p.assignment.WholeCards) == 0) {
			continue
		}
		h := Holder{UID: p.uid, Namespace: p.namespace, Name: p.name}
		for _, ca := range p.assignment.Containers {
			if i, ok := index[ca.CardUUID]; ok {
				h.Grants = append(h.Grants, allocator.Grant{Card: i, Units: ca.Units})
			}
		}
		for _, w := range p.assignment.WholeCards {
			for _, u := range w.CardUUIDs {
				if i, ok := index[u]; ok {
					h.Grants = append(h.Grants, allocator.Grant{Card: i, Whole: true})
				}
			}
		}
		out = append(out, h)
	}
	return n.snap, out, nil
}
