package cache

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// Assume records a's units for the pod before bind writes to the API; req is
// the pod's request as bind read it (api.Names.RequestFromPod), whose CPU and
// memory the node's HostFree loses. basis is the snapshot the assignment was
// decided on: if the node changed since (another bind assumed a pod there, a
// pod finished, the inventory changed), Assume fails with ErrStale and
// nothing is recorded; decide again.
func (c *Cache) Assume(pod *corev1.Pod, req api.PodRequest, a api.Assignment, basis *allocator.Node) error {
	if err := a.Validate(); err != nil {
		return err
	}
	host := allocator.HostResources(req.Host)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.pods[pod.UID]; ok {
		if old.state != Assumed || !old.bindDone {
			return fmt.Errorf("%w: %s/%s", ErrAlreadyAssumed, pod.Namespace, pod.Name)
		}
		// kube-scheduler binds the pod again, so the earlier bind, whose
		// outcome was unknown (FinishBinding), did not bind it. Release the
		// earlier units; the snapshot changed, so the caller decides again
		// on one without them.
		c.remove(old)
		return ErrStale
	}
	n, ok := c.nodes[a.Node]
	if !ok || !n.known {
		return fmt.Errorf("%w: %s", ErrUnknownNode, a.Node)
	}
	if n.snap != basis {
		return ErrStale
	}
	// Defence in depth: the decision was made on this very snapshot, but
	// check the invariant anyway.
	if err := cardsFit(n.snap, a, false); err != nil {
		return err
	}
	c.add(&podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: a.Node, assignment: a, host: host, state: Assumed})
	return nil
}

// Forget drops an assumption whose API writes failed. A pod the informer has
// confirmed meanwhile is left alone.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[uid]; ok && p.state == Assumed {
		c.remove(p)
	}
}

// FinishBinding ends an assumption's bind: its API write succeeded, or its
// outcome is unknown (the request timed out or its connection broke). Either
// way its units stay counted until the informer shows the pod bound
// (confirmed) or deleted, the assume TTL passes, or kube-scheduler binds the
// pod again (then the pod was not bound, and Assume releases these units).
// Counting units that may be free is safe; forgetting units that may be held
// is not.
func (c *Cache) FinishBinding(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[uid]; ok && p.state == Assumed {
		p.bindDone = true
		p.deadline = c.clock.Now().Add(c.assumeTTL)
	}
}

// CleanupExpired drops assumed pods whose bind finished more than the assume
// TTL ago without the informer confirming them (the pod was deleted before
// the informer saw it bound). It returns how many were dropped.
func (c *Cache) CleanupExpired() int {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var expired []*podState
	for _, p := range c.pods {
		if p.state == Assumed && p.bindDone && now.After(p.deadline) {
			expired = append(expired, p)
		}
	}
	for _, p := range expired {
		klog.V(2).InfoS("Assumed pod expired without confirmation", "pod", klog.KRef(p.namespace, p.name), "node", p.node)
		c.remove(p)
	}
	return len(expired)
}

// Reserve turns the pod's assumption, just made for a filter that kept one
// node, into a reservation: its units count until bind claims it (Claim), the
// pod is filtered again (Unreserve), confirmed or deleted, or ttl passes.
func (c *Cache) Reserve(uid types.UID, ttl time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	if ok = ok && p.state == Assumed && !p.bindDone; ok {
		p.reserved, p.bindDone, p.deadline = true, true, c.clock.Now().Add(ttl)
	}
	return ok
}

// Claim hands bind the pod's reservation on node, now an assumption whose bind is in flight. One on
// another node, or no longer valid there (Assume's checks), is dropped: bind decides again.
func (c *Cache) Claim(uid types.UID, node string) (api.Assignment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	if !ok || p.state != Assumed || !p.reserved {
		return api.Assignment{}, false
	}
	n := c.nodes[node]
	ok = p.node == node && n != nil && n.known && n.snap.InventoryErr == nil && n.snap.Unit == p.assignment.Unit && cardsFit(n.snap, p.assignment, true) == nil
	if !ok {
		c.remove(p)
		return api.Assignment{}, false
	}
	p.reserved, p.bindDone, p.deadline = false, false, time.Time{}
	return p.assignment, true
}

// Unreserve drops the pod's reservation and reports whether it had one.
func (c *Cache) Unreserve(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	if ok = ok && p.state == Assumed && p.reserved; ok {
		c.remove(p)
	}
	return ok
}

// cardsFit checks that every card a names is in n, schedulable, within capacity and not held whole
// by another. counted says a's own units are already in n (a reservation's): then a shared card needs
// Used <= Capacity and a's whole cards are held whole by a; otherwise a shared card needs
// Used+units <= Capacity and a card a gives whole must be unused and not held whole.
func cardsFit(n *allocator.Node, a api.Assignment, counted bool) error {
	card := func(uuid string) (allocator.Card, error) {
		if i := slices.IndexFunc(n.Cards, func(c allocator.Card) bool { return c.UUID == uuid }); i >= 0 {
			return n.Cards[i], nil
		}
		return allocator.Card{}, fmt.Errorf("%w: card %s is not in node %s's inventory", ErrOverCapacity, uuid, a.Node)
	}
	for _, uuid := range a.WholeCardUUIDs() {
		c, err := card(uuid)
		if err != nil {
			return err
		}
		if !c.Schedulable() || counted && c.Used > c.Capacity || !counted && (c.Used > 0 || c.Whole) {
			return fmt.Errorf("%w: card %d cannot be given whole: it has %d units used, held whole: %v", ErrOverCapacity, c.Index, c.Used, c.Whole)
		}
	}
	add := map[string]int64{}
	for _, ca := range a.Containers {
		add[ca.CardUUID] += ca.Units
	}
	for uuid, units := range add {
		c, err := card(uuid)
		if err != nil {
			return err
		}
		if counted {
			units = 0 // already in c.Used
		}
		if !c.Schedulable() || c.Whole || c.Used+units > c.Capacity {
			return fmt.Errorf("%w: card %d has %d of %d units used, asked for %d more", ErrOverCapacity, c.Index, c.Used, c.Capacity, units)
		}
	}
	return nil
}
