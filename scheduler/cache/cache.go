// Package cache owns the extender's view of the cluster (docs/design.md, "The
// cache"): each node's cards (its inventory annotation) and the units the
// pods assigned to them hold, fed by informers and rebuilt from the pods'
// records on start. For /inspect only, dra.go reads the DRA driver's
// ResourceSlices and ResourceClaims. Bind uses kube-scheduler's assume
// protocol (Assume, Forget, confirmed by the informer). Every node's state is
// an immutable *allocator.Node replaced on change, so a snapshot is a slice
// of pointers taken under a read lock; no lock is held across an API call.
package cache

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	reserved bool // the filter's assumption (Reserve) until bind claims it; expires at deadline
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
	// plugins are the device plugin pods on the node, nil until one is seen
	// (WithDevicePluginSelector).
	plugins map[types.UID]pluginPod
	// kubeletBare is true while the node's kubelet knows the gpu-mem
	// resource but no device of it (kubeletBare): restarted, its device
	// plugin not registered with it again yet.
	kubeletBare bool
	// notServing is the plugin's own word that the kubelet streams from it
	// no longer (api.Inventory.NotServing): the kubelet is down.
	notServing string
	pods       map[types.UID]*podState
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
	// nodeKeys are the nodes' published record keys (nodekeys.go).
	nodeKeys nodeKeys
	// names are the resource names and keys read from nodes and pods.
	names api.Names
	// pluginSel finds the device plugin's pods (nil: not followed);
	// pluginNodes is the node of each one seen (see plugins.go).
	pluginSel   labels.Selector
	pluginNodes map[types.UID]string
}

// Option configures a Cache.
type Option func(*Cache)

// WithRecordKeys makes the cache count only records the keys verify
// (api.RecordKeys.Verify), the ones the device plugins trust: a record
// written or changed by anyone without the extender's key is not a valid
// one, unless the record's own node signed it with the key that node
// publishes (api.Names.AnnotationRecordKey, read by SetNode).
func WithRecordKeys(keys api.RecordKeyring) Option { return func(ca *Cache) { ca.keys = keys } }

// WithNames sets the resource names and keys the cache reads (default:
// api.DefaultNames).
func WithNames(n api.Names) Option { return func(ca *Cache) { ca.names = n } }

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

		pluginNodes: map[types.UID]string{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// SetPod records a pod added or updated by the informer. The pod counts on
// its node's cards when it carries a trusted record, is bound to the record's
// node and still holds its units (api.HoldsUnits: a terminating pod counts).
// An assumed pod keeps its assumption until the informer shows it bound with
// its record, which then replaces it (the plugin may have corrected a card).
// A pod that holds units and loses its valid record keeps counting the last
// valid one (state Remembered) until the device plugin rewrites it from the
// kubelet's account; an extender started after the loss counts the pod's
// CPU and memory only until that repair.
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
		keys := api.KeysOf(c.keys).PublicOnly()
		keys.Nodes = &c.nodeKeys
		c.nodeKeys.track(pod, pod.Annotations[c.names.AnnotationAssignment()])
		a, err = c.names.TrustedAssignment(pod, keys)
		valid = err == nil && a.Node == pod.Spec.NodeName
		a.Phase = api.HeldPhase(pod, a) // what inspect shows; the cache counts a record in either phase
		if err != nil && !errors.Is(err, api.ErrNoAssignment) {
			klog.V(4).InfoS("Ignoring pod's GPU assignment", "pod", klog.KObj(pod), "err", err)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.trackPluginLocked(pod)
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
	c.nodeKeys.forget(uid)
	c.untrackPluginLocked(uid)
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
