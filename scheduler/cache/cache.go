// Package cache owns the extender's view of the cluster: which GPU cards
// every node has (from the device plugin's inventory annotation) and how many
// units of each card the pods assigned to it hold.
//
// It is fed by client-go informers (pods and nodes) and rebuilt from the
// pods' assignment annotations on start, so a restart loses nothing. Bind
// uses the assume protocol of kube-scheduler's own cache: Assume records a
// placement before the API writes, Forget drops it if they fail, and the
// informer confirms it when it shows the pod bound with its assignment.
//
// Reads are cheap and lock-light: every node's state is published as an
// immutable *allocator.Node that is replaced (never changed) when the node or
// one of its pods changes, so a snapshot is a slice of pointers taken under a
// read lock and the policy runs on it outside the lock. The cache never holds
// its lock across an API call.
package cache

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// DefaultAssumeTTL is how long an assumed pod whose bind finished is kept
// without the informer confirming it. The informer normally confirms within
// milliseconds; the TTL only matters when a pod vanished unseen.
const DefaultAssumeTTL = 5 * time.Minute

// Errors returned (wrapped) by the cache.
var (
	// ErrUnknownNode: the node is not (or no longer) in the cache.
	ErrUnknownNode = errors.New("node unknown to the gpushare extender")
	// ErrStale: the node changed since the snapshot a decision was made on;
	// decide again on a fresh snapshot.
	ErrStale = errors.New("node changed since the snapshot")
	// ErrAlreadyAssumed: the pod is already assumed or confirmed on a node.
	ErrAlreadyAssumed = errors.New("pod already has GPU memory in the cache")
	// ErrOverCapacity: the assignment would put more units on a card than it holds.
	ErrOverCapacity = errors.New("assignment exceeds a card's capacity")
)

// State says how the cache knows about a pod's units; it is the contract's
// api.ExtenderPodState, shown at GET /inspect.
type State = api.ExtenderPodState

const (
	// Assumed: recorded by bind before the API writes; not yet seen by the informer.
	Assumed = api.ExtenderPodAssumed
	// Confirmed: the informer shows the pod bound to the node with a valid assignment.
	Confirmed = api.ExtenderPodConfirmed
	// Remembered: the pod holds its units but lost its valid assignment; the
	// last valid one still counts (see SetPod).
	Remembered = api.ExtenderPodRemembered
)

// podState is what the cache holds for one pod.
type podState struct {
	uid        types.UID
	namespace  string
	name       string
	node       string
	assignment api.Assignment
	// host is the pod's CPU and memory request; every pod bound to a node
	// is kept for it, GPU or not (the node's HostFree).
	host  allocator.HostResources
	state State
	// bindDone and deadline: an assumed pod whose bind finished expires at
	// deadline unless confirmed first.
	bindDone bool
	deadline time.Time
}

// nodeState is one node's inventory and the pods on it.
type nodeState struct {
	name string
	// id is the snapshot's allocator.Node.ID: held from the entry's
	// creation to its removal (gc), then free for the next new node.
	id int32
	// known is true while the node informer has the node.
	known  bool
	inv    api.Inventory
	invErr error
	// invCode classifies invErr for /inspect.
	invCode api.InventoryErrorCode
	iso     api.Isolation
	// alloc is the node's allocatable CPU and memory; hasAlloc is false
	// when the node reports none (HostFree is then unknown).
	alloc    allocator.HostResources
	hasAlloc bool
	// models is what the node adds to the cluster's per-model capacity.
	models map[string]allocator.ModelCapacity
	pods   map[types.UID]*podState
	// snap is the published, immutable view; replaced on every change.
	snap *allocator.Node
}

// Cache is the extender's cluster view. The zero value is not usable; use New.
type Cache struct {
	clock     clock.Clock
	assumeTTL time.Duration

	mu    sync.RWMutex
	nodes map[string]*nodeState
	// freeIDs are node IDs given back by removed entries; nextID is the
	// lowest never given.
	freeIDs []int32
	nextID  int32
	// snaps holds the published snapshot of every known node: the filter's
	// lookups read this map only.
	snaps map[string]snapRef
	pods  map[types.UID]*podState
	// shapes counts the demands of the pods seen (see learn).
	shapes map[shapeKey]float64
	// modelCap is the cluster's cards and units per model.
	modelCap     map[string]allocator.ModelCapacity
	seen         map[types.UID]struct{}
	workload     *allocator.Workload
	workloadDirt bool
	synced       bool
	// handlers report whether the cache's informer handlers processed their
	// initial lists (Attach; WaitForSync waits for them).
	handlers []toolscache.InformerSynced
	// keys verify records (nil: every record that decodes and belongs to
	// its pod counts).
	keys api.RecordKeyring
	// names are the resource names and keys read from nodes and pods.
	names api.Names
}

// Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock used for assumed-pod expiry (tests use a fake).
func WithClock(c clock.Clock) Option { return func(ca *Cache) { ca.clock = c } }

// WithRecordKeys makes the cache count only records the keys verify
// (api.RecordKeys.Verify), the ones the device plugins trust: a record
// written or changed by anyone without the key is not a valid one.
func WithRecordKeys(keys api.RecordKeyring) Option { return func(ca *Cache) { ca.keys = keys } }

// WithNames sets the resource names and keys the cache reads (default:
// api.DefaultNames).
func WithNames(n api.Names) Option { return func(ca *Cache) { ca.names = n } }

// WithAssumeTTL sets how long a bound but unconfirmed assumption lives.
func WithAssumeTTL(d time.Duration) Option { return func(ca *Cache) { ca.assumeTTL = d } }

// New returns an empty cache. Feed it with Attach (informers) or with the
// Set/Delete methods directly.
func New(opts ...Option) *Cache {
	c := &Cache{
		clock:     clock.RealClock{},
		assumeTTL: DefaultAssumeTTL,
		nodes:     map[string]*nodeState{},
		snaps:     map[string]snapRef{},
		pods:      map[types.UID]*podState{},
		shapes:    map[shapeKey]float64{},
		modelCap:  map[string]allocator.ModelCapacity{},
		seen:      map[types.UID]struct{}{},
		names:     api.DefaultNames(),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

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

	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(node.Name)
	n.known = true
	n.inv, n.invErr, n.invCode, n.iso = inv, nil, "", iso
	n.alloc, n.hasAlloc = host, hasHost
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
	n.hasAlloc = false
	c.setModels(n, nil)
	c.publish(n)
	c.gc(n)
}

// packedNode keeps a node's snapshot and (up to 8) cards in one allocation,
// so that evaluating a node touches adjacent memory: at 5,000 nodes the
// filter's cost is mostly cache misses.
type packedNode struct {
	node  allocator.Node
	cards [8]allocator.Card
}

// rebuild publishes a fresh immutable snapshot of the node. Called with the
// write lock held.
func (n *nodeState) rebuild() {
	var snap *allocator.Node
	var cards []allocator.Card
	if k := len(n.inv.Cards); k <= len(packedNode{}.cards) {
		p := &packedNode{}
		snap, cards = &p.node, p.cards[:k:k]
	} else {
		snap, cards = &allocator.Node{}, make([]allocator.Card, k)
	}
	snap.Name, snap.ID, snap.Unit, snap.InventoryErr = n.name, n.id, n.inv.Unit, n.invErr
	if n.hasAlloc {
		free := n.alloc
		for _, p := range n.pods {
			free.CPUMilli -= p.host.CPUMilli
			free.MemoryMiB -= p.host.MemoryMiB
		}
		free.CPUMilli, free.MemoryMiB = max(free.CPUMilli, 0), max(free.MemoryMiB, 0)
		snap.HostFree = &free
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

// SetPod records a pod added or updated by the informer. The pod counts on
// its node's cards when it carries a valid assignment (api.Names.AssignmentFromPod),
// is bound to the assignment's node and still holds its units
// (api.HoldsUnits: not Succeeded or Failed; a terminating pod still counts,
// its containers may still hold the memory).
//
// An assumed pod the informer does not yet show bound with its assignment
// keeps its assumption; once it does, the informer's record replaces the
// assumed one (the device plugin may have corrected a card).
//
// A pod that holds units and loses its valid record (removed, garbled,
// changed so that it no longer matches the pod or, with record keys, its
// signature) keeps counting the last valid record the cache saw (state
// Remembered): the kubelet still holds those units, and forgetting them would
// put the next pod on a full card. The device plugin rewrites such a record
// from the kubelet's account at its next reconciliation, which confirms the
// pod again. An extender started after the record was lost has no record to
// remember: it counts the pod's CPU and memory only until that repair.
func (c *Cache) SetPod(pod *corev1.Pod) {
	if pod == nil {
		return
	}
	// Host is set even when the gpu-mem demand is invalid.
	req, reqErr := c.names.RequestFromPod(pod)
	host := allocator.HostResources(req.Host)
	holds := api.HoldsUnits(pod)
	bound := holds && pod.Spec.NodeName != ""
	var a api.Assignment
	valid := false
	if bound && reqErr == nil && !req.Empty() {
		var err error
		a, err = c.names.AssignmentFromPod(pod)
		if err == nil {
			err = api.KeysOf(c.keys).Verify(a)
		}
		valid = err == nil && a.Node == pod.Spec.NodeName
		if err != nil && !errors.Is(err, api.ErrNoAssignment) {
			klog.V(4).InfoS("Ignoring pod's GPU assignment", "pod", klog.KObj(pod), "err", err)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if reqErr == nil {
		c.learn(pod.UID, req, host)
	}
	old := c.pods[pod.UID]
	switch {
	case !holds:
		c.remove(old)
	case valid:
		if old != nil && old.state == Confirmed && old.node == a.Node && old.host == host && sameCards(old.assignment, a) {
			// A status update that changes nothing we count: keep the
			// published snapshot (and so concurrent binds' basis) as is.
			old.assignment = a
			return
		}
		c.remove(old)
		c.add(&podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: a.Node, assignment: a, host: host, state: Confirmed})
	case bound && old != nil && old.state != Assumed && len(old.assignment.Containers) > 0 && old.node == pod.Spec.NodeName && reqErr == nil && !req.Empty():
		// Lost its valid record while holding units: keep counting them.
		if old.state != Remembered {
			klog.InfoS("A pod that holds GPU memory lost its valid assignment record; still counting the last valid one until the device plugin rewrites it", "pod", klog.KObj(pod), "node", old.node)
		}
		if old.state == Remembered && old.host == host {
			return
		}
		c.remove(old)
		c.add(&podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: old.node, assignment: old.assignment, host: host, state: Remembered})
	case bound && (old == nil || old.state != Assumed):
		// Bound without a (valid) assignment: a pod that asks for no GPU,
		// or one another scheduler placed. Its CPU and memory count.
		if old != nil && old.node == pod.Spec.NodeName && old.host == host && len(old.assignment.Containers) == 0 && len(old.assignment.WholeCards) == 0 {
			return
		}
		c.remove(old)
		c.add(&podState{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: pod.Spec.NodeName, host: host, state: Confirmed})
	case old != nil && old.state != Assumed:
		c.remove(old)
	}
	// Otherwise: not bound yet, or assumed and not yet confirmed: keep as is.
}

func sameCards(a, b api.Assignment) bool {
	if len(a.Containers) != len(b.Containers) || !slices.Equal(a.WholeCardUUIDs(), b.WholeCardUUIDs()) {
		return false
	}
	for i := range a.Containers {
		x, y := a.Containers[i], b.Containers[i]
		if x.CardUUID != y.CardUUID || x.Units != y.Units {
			return false
		}
	}
	return true
}

// DeletePod records a pod removed by the informer: its units are released.
func (c *Cache) DeletePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(c.pods[uid])
	delete(c.seen, uid)
}

func (c *Cache) add(p *podState) {
	c.pods[p.uid] = p
	n := c.node(p.node)
	n.pods[p.uid] = p
	c.publish(n)
}

func (c *Cache) remove(p *podState) {
	if p == nil {
		return
	}
	delete(c.pods, p.uid)
	if n, ok := c.nodes[p.node]; ok {
		delete(n.pods, p.uid)
		c.publish(n)
		c.gc(n)
	}
}

// shapeKey is one demand shape: units on one card or a number of whole
// cards (both 0: no GPU) and the CPU and memory that come with them.
type shapeKey struct {
	units      int64
	wholeCards int
	host       allocator.HostResources
}

// learn counts a pod's demand once per pod UID: a pod that asks for no GPU
// is one shape of 0 units with its CPU and memory; a GPU pod is one shape
// per requesting container (units, or whole cards), the pod's CPU and memory split evenly between
// them (exact for the common one-container pod).
func (c *Cache) learn(uid types.UID, req api.PodRequest, host allocator.HostResources) {
	if _, ok := c.seen[uid]; ok {
		return
	}
	c.seen[uid] = struct{}{}
	if req.Empty() {
		c.shapes[shapeKey{host: host}]++
	} else {
		k := int64(len(req.Containers) + len(req.WholeCards))
		share := allocator.HostResources{CPUMilli: host.CPUMilli / k, MemoryMiB: host.MemoryMiB / k}
		for _, ct := range req.Containers {
			c.shapes[shapeKey{units: ct.Units, host: share}]++
		}
		for _, ct := range req.WholeCards {
			c.shapes[shapeKey{wholeCards: ct.Cards, host: share}]++
		}
	}
	c.workloadDirt = true
}

// setModels replaces node n's contribution to the per-model capacity.
func (c *Cache) setModels(n *nodeState, models map[string]allocator.ModelCapacity) {
	for m, mc := range n.models {
		t := c.modelCap[m]
		t.Cards -= mc.Cards
		t.Units -= mc.Units
		if t.Cards <= 0 {
			delete(c.modelCap, m)
		} else {
			c.modelCap[m] = t
		}
	}
	for m, mc := range models {
		t := c.modelCap[m]
		t.Cards += mc.Cards
		t.Units += mc.Units
		c.modelCap[m] = t
	}
	if len(n.models) > 0 || len(models) > 0 {
		c.workloadDirt = true
	}
	n.models = models
}

func modelsOf(inv api.Inventory) map[string]allocator.ModelCapacity {
	out := map[string]allocator.ModelCapacity{}
	for _, card := range inv.Cards {
		mc := out[card.Model]
		mc.Cards++
		mc.Units += card.Units
		out[card.Model] = mc
	}
	return out
}

// Workload returns the histogram of the demands of every pod the cache has
// seen (see learn; one shape per distinct demand, weighted by how often it
// was seen) and the cluster's per-model card capacity. The value is shared
// and must not be changed.
func (c *Cache) Workload() *allocator.Workload {
	c.mu.RLock()
	w, dirty := c.workload, c.workloadDirt
	c.mu.RUnlock()
	if !dirty && w != nil {
		return w
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.workloadDirt || c.workload == nil {
		// A fresh value each time: the one handed out before is never
		// changed, so policies may read it without the lock.
		w := &allocator.Workload{Shapes: make([]allocator.Shape, 0, len(c.shapes)), ModelCapacity: maps.Clone(c.modelCap)}
		for k, n := range c.shapes {
			w.Shapes = append(w.Shapes, allocator.Shape{Units: k.units, WholeCards: k.wholeCards, Host: k.host, Weight: n})
		}
		sort.Slice(w.Shapes, func(a, b int) bool {
			x, y := w.Shapes[a], w.Shapes[b]
			if x.WholeCards != y.WholeCards {
				return x.WholeCards < y.WholeCards
			}
			if x.Units != y.Units {
				return x.Units < y.Units
			}
			if x.Host.CPUMilli != y.Host.CPUMilli {
				return x.Host.CPUMilli < y.Host.CPUMilli
			}
			return x.Host.MemoryMiB < y.Host.MemoryMiB
		})
		if c.workload.Near(w, allocator.WorkloadTolerance) {
			// Nothing that counts changed (a node update, a pod seen again),
			// or the shapes' shares moved less than the tolerance since the
			// value handed out (a burst of pods of known shapes): the same
			// value, so the extender's memo, keyed by it, holds.
			w = c.workload
		} else {
			w.Reindex()
		}
		c.workload, c.workloadDirt = w, false
	}
	return c.workload
}

// Snapshot returns the published views of the named nodes, in order; a nil
// entry marks a node the cache does not know. The views are immutable.
func (c *Cache) Snapshot(names []string) []*allocator.Node {
	return c.SnapshotInto(nil, names)
}

// SnapshotInto is Snapshot into dst's array when it has room (dst's
// contents are overwritten), else into a new one.
func (c *Cache) SnapshotInto(dst []*allocator.Node, names []string) []*allocator.Node {
	out := dst[:0]
	if cap(out) < len(names) {
		out = make([]*allocator.Node, 0, len(names))
	}
	out = out[:len(names)]
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i, name := range names {
		out[i] = c.snaps[name].snap
	}
	return out
}

// SnapshotsOf is SnapshotInto for names given as bytes (name(i) for i <
// len(snaps)), read from a request body without a copy: the extender's
// decoder resolves a call's candidate names here as it parses them. For a
// known node it sets snaps[i], names[i] (the cache's own copy of the name,
// the snapshot's Name) and ids[i] (the snapshot's ID); for another it
// leaves snaps[i] nil. names and ids have snaps' length.
func (c *Cache) SnapshotsOf(snaps []*allocator.Node, names []string, ids []int32, name func(i int) []byte) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range snaps {
		// The map holds the name and ID beside the snapshot: reading them
		// from the snapshot would touch 5,000 more cache lines a call.
		ref := c.snaps[string(name(i))]
		snaps[i], names[i], ids[i] = ref.snap, ref.name, ref.id
	}
}

// snapRef is a known node's published snapshot, its name and ID.
type snapRef struct {
	name string
	id   int32
	snap *allocator.Node
}

// NodeSnapshot returns the published view of one node, to decide a bind on
// and hand back to Assume.
func (c *Cache) NodeSnapshot(name string) (*allocator.Node, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[name]
	if !ok || !n.known {
		return nil, fmt.Errorf("%w: %s", ErrUnknownNode, name)
	}
	return n.snap, nil
}

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
	add := map[string]int64{}
	for _, ca := range a.Containers {
		add[ca.CardUUID] += ca.Units
	}
	for _, uuid := range a.WholeCardUUIDs() {
		found := false
		for _, card := range n.snap.Cards {
			if card.UUID == uuid {
				found = true
				if !card.Schedulable() || card.Used > 0 || card.Whole {
					return fmt.Errorf("%w: card %d cannot be given whole: it has %d units used, held whole: %v", ErrOverCapacity, card.Index, card.Used, card.Whole)
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: card %s is not in node %s's inventory", ErrOverCapacity, uuid, a.Node)
		}
	}
	for uuid, units := range add {
		found := false
		for _, card := range n.snap.Cards {
			if card.UUID == uuid {
				found = true
				if !card.Schedulable() || card.Whole || card.Used+units > card.Capacity {
					return fmt.Errorf("%w: card %d has %d of %d units used, asked for %d more", ErrOverCapacity, card.Index, card.Used, card.Capacity, units)
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: card %s is not in node %s's inventory", ErrOverCapacity, uuid, a.Node)
		}
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

// PodState reports whether the cache counts the pod, and how.
func (c *Cache) PodState(uid types.UID) (State, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.pods[uid]
	if !ok {
		return "", false
	}
	return p.state, true
}

// MarkSynced records that the informers have synced; Synced reports it.
func (c *Cache) MarkSynced() {
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
}

// Synced reports whether the informers have delivered their initial lists.
func (c *Cache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}
