// Package cluster owns the device plugin's conversation with the API server: informers over
// the pods bound to its node and its Node (isolation), the node's GPU inventory and labels, and
// the pods' assignment records. One client writes; another (WithReader, the node's identity)
// may make every read.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/gpushare/gpushare/api"
)

// ErrNodeNotFound is returned (wrapped) by Start when the plugin's Node does
// not exist.
var ErrNodeNotFound = errors.New("node not found")

// Cluster is the plugin's view of its node and the pods bound to it.
type Cluster struct {
	client kubernetes.Interface // writes, and reads when reader is not set
	reader kubernetes.Interface // reads the node's pods and Node
	node   string
	names  api.Names

	podFactory  informers.SharedInformerFactory
	nodeFactory informers.SharedInformerFactory
	pods        corelisters.PodLister
	podsSynced  cache.InformerSynced
	nodeSynced  cache.InformerSynced
	nodeInf     cache.SharedIndexInformer

	mu       sync.Mutex
	arrivals map[types.UID]uint64 // pod UID -> order in which the informer first saw it
	next     uint64
	changed  chan struct{}        // closed at the next pod event (PodsChanged)
	written  map[types.UID]string // pod UID -> resourceVersion of the plugin's last record write
}

// Option configures a Cluster.
type Option func(*Cluster)

// WithNames sets the keys the cluster reads and writes (default:
// api.DefaultNames).
func WithNames(n api.Names) Option { return func(c *Cluster) { c.names = n } }

// WithReader makes every read of the node's pods and Node with reader: the node's identity,
// which the Node authorizer lets read only pods by the selector spec.nodeName=NODE and its own
// Node, as every read here does.
func WithReader(reader kubernetes.Interface) Option { return func(c *Cluster) { c.reader = reader } }

// New builds the informers (started by Start) for the node named node.
// client writes (records, the Node's inventory) and, without WithReader,
// reads.
func New(client kubernetes.Interface, node string, opts ...Option) *Cluster {
	c := &Cluster{client: client, reader: client, node: node, names: api.DefaultNames(), arrivals: map[types.UID]uint64{}, changed: make(chan struct{}), written: map[types.UID]string{}}
	for _, o := range opts {
		o(c)
	}
	c.podFactory = informers.NewSharedInformerFactoryWithOptions(c.reader, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	pi := c.podFactory.Core().V1().Pods()
	c.pods = pi.Lister()
	// Synced once the arrival handler has seen the initial list too, not
	// only the informer's store: the queue orders pods by arrival.
	reg, err := pi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.arrived,
		UpdateFunc: func(_, obj any) { c.arrived(obj) },
		DeleteFunc: c.departed,
	})
	c.podsSynced = pi.Informer().HasSynced
	if err == nil {
		c.podsSynced = reg.HasSynced
	}
	c.nodeFactory = informers.NewSharedInformerFactoryWithOptions(c.reader, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	c.nodeInf = c.nodeFactory.Core().V1().Nodes().Informer()
	c.nodeSynced = c.nodeInf.HasSynced
	return c
}

func (c *Cluster) arrived(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName != c.node {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.arrivals[p.UID]; !seen {
		c.arrivals[p.UID] = c.next
		c.next++
	}
	c.notify()
}

// notify closes the channel PodsChanged handed out (c.mu held).
func (c *Cluster) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// PodsChanged is closed at the pod cache's next change (a pod of the node added, updated or
// deleted): a wait for a pod the kubelet saw first ends as it arrives.
func (c *Cluster) PodsChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Cluster) departed(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.arrivals, p.UID)
	delete(c.written, p.UID)
	c.notify()
}

// RecordAhead reports whether the API server holds a record the plugin wrote on pod (a copy
// from the pod cache) after the version pod shows: the cache has yet to show that write.
func (c *Cluster) RecordAhead(pod *corev1.Pod) bool {
	c.mu.Lock()
	rv, ok := c.written[pod.UID]
	c.mu.Unlock()
	cmp, err := resourceversion.CompareResourceVersion(pod.ResourceVersion, rv)
	return ok && err == nil && cmp < 0
}

// Arrival is the order in which the pod informer first saw the pod bound to the node (0, 1, …):
// the kubelet's watch sees the bindings in this order too and admits pods as they arrive. false:
// not seen yet. The informer's initial list gets the list's order, which says nothing.
func (c *Cluster) Arrival(uid types.UID) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.arrivals[uid]
	return n, ok
}

// Node is the node's name.
func (c *Cluster) Node() string { return c.node }

// Reader is the client the cluster reads the node's pods and Node with.
func (c *Cluster) Reader() kubernetes.Interface { return c.reader }

// CheckNode fails with a clear message when the Node does not exist or
// cannot be read.
func (c *Cluster) CheckNode(ctx context.Context) error {
	_, err := c.reader.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: NODE_NAME is %q but no such Node exists (set NODE_NAME from the downward API: fieldRef spec.nodeName)", ErrNodeNotFound, c.node)
	}
	if err != nil {
		return fmt.Errorf("read Node %q: %w", c.node, err)
	}
	return nil
}

// OnIsolation calls fn with the node's isolation annotation each time the
// Node is added or changes (an absent annotation isolates nothing). Call
// before Start.
func (c *Cluster) OnIsolation(fn func(api.Isolation, error)) {
	handle := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Name != c.node {
			return
		}
		fn(api.ParseIsolation(n.Annotations[c.names.AnnotationIsolation()]))
	}
	_, _ = c.nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
}

// Start starts the informers and waits for their caches.
func (c *Cluster) Start(ctx context.Context) error {
	c.podFactory.Start(ctx.Done())
	c.nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.podsSynced, c.nodeSynced) {
		return fmt.Errorf("pod and node informers did not sync: %w", ctx.Err())
	}
	return nil
}

// Pods lists the pods bound to the node, from the informer's cache.
func (c *Cluster) Pods() ([]*corev1.Pod, error) {
	all, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := all[:0:0]
	for _, p := range all {
		if p.Spec.NodeName == c.node { // the field selector already does this; the fake clientset does not
			out = append(out, p)
		}
	}
	return out, nil
}

// UpdateAssignment reads the pod's assignment from the API server, applies
// mutate and writes it back if mutate reports a change. The write is a
// merge patch carrying the resourceVersion read, retried on conflict, so a
// concurrent writer is never overwritten. A pod that is gone or has another
// UID (deleted and re-created) is left alone.
func (c *Cluster) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	return c.rewriteRecord(ctx, namespace, name, uid, func(pod *corev1.Pod) (api.Assignment, bool, error) {
		a, err := c.names.TrustedAssignment(pod, api.RecordKeys{}) // the caller's mutate verifies
		if err != nil {
			return a, false, err
		}
		changed := mutate(&a)
		return a, changed, nil
	})
}

// RepairAssignment writes the record rebuild returns (true) for the pod as read, in place of
// whatever it carries (none, an undecodable or untrusted one), as UpdateAssignment writes.
func (c *Cluster) RepairAssignment(ctx context.Context, namespace, name string, uid types.UID, rebuild func(*corev1.Pod) (api.Assignment, bool)) error {
	return c.rewriteRecord(ctx, namespace, name, uid, func(pod *corev1.Pod) (api.Assignment, bool, error) {
		a, ok := rebuild(pod)
		return a, ok, nil
	})
}

// CacheBehind reports whether the API server (one list of the node's pods, latest state) has a
// pod bound to the node, not admitted nor being deleted, that the pod cache lacks or holds at
// another resourceVersion: only then can waiting show the plugin a pod the kubelet admits. A pod
// deleted before its admission is on neither side: the plugin answers at once.
func (c *Cluster) CacheBehind(ctx context.Context) (bool, error) {
	list, err := c.reader.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.node).String()})
	if err != nil {
		return false, fmt.Errorf("list the node's pods: %w", err)
	}
	cached, err := c.Pods()
	if err != nil {
		return false, err
	}
	have := make(map[types.UID]string, len(cached))
	for _, p := range cached {
		have[p.UID] = p.ResourceVersion
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != c.node || !api.MayStartContainers(p) || api.Admitted(p) {
			continue
		}
		if rv, ok := have[p.UID]; !ok || rv != p.ResourceVersion {
			return true, nil
		}
	}
	return false, nil
}

// readPod reads one pod of the node from the API server (nil: none by that name on this node),
// by a list with the field selectors metadata.name and spec.nodeName: the node-scope webhook
// (docs/security.md) lets the plugin read pods only by listing its node's. Without a
// resourceVersion it reads the latest state, as a get does.
func (c *Cluster) readPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("metadata.name", name), fields.OneTermEqualSelector("spec.nodeName", c.node))
	list, err := c.reader.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("read pod %s/%s: %w", namespace, name, err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Name == name && p.Spec.NodeName == c.node { // the fake clientset ignores field selectors
			return p, nil
		}
	}
	return nil, nil
}

// cachedPod is a copy of the pod cache's pod namespace/name when it has
// the UID uid (nil otherwise).
func (c *Cluster) cachedPod(namespace, name string, uid types.UID) *corev1.Pod {
	if c.pods == nil {
		return nil
	}
	pod, err := c.pods.Pods(namespace).Get(name)
	if err != nil || pod.UID != uid || pod.Spec.NodeName != c.node {
		return nil
	}
	return pod.DeepCopy()
}

// rewriteRecord reads the pod from the API server and writes the record
// next returns for it, when next says to (true), with patchRecord; a
// conflict starts over, next called again on the pod as read. A pod that is
// gone or has another UID (deleted and re-created) is left alone; an error
// of next is returned as is.
//
// The first try writes on the pod cache's copy, when it has the pod and next
// writes on it: one round trip instead of two, on the admission's path. The
// write is conditional on the record the copy shows (patchRecord), so a copy
// behind on other fields (the kubelet's status) still writes at once, and a
// copy behind on the record costs the refused write and the read. A copy on
// which next writes nothing is believed unless the plugin wrote the record
// after it (RecordAhead): only the plugin writes a record after the bind.
func (c *Cluster) rewriteRecord(ctx context.Context, namespace, name string, uid types.UID, next func(*corev1.Pod) (api.Assignment, bool, error)) error {
	if pod := c.cachedPod(namespace, name, uid); pod != nil {
		a, write, err := next(pod)
		switch {
		case err == nil && write:
			if err := c.patchRecord(ctx, pod, a); !apierrors.IsConflict(err) {
				return err
			}
		case err == nil && !c.RecordAhead(pod):
			return nil // the copy shows the plugin's last write, if any: nothing to write
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := c.readPod(ctx, namespace, name)
		if err != nil || pod == nil || pod.UID != uid {
			return err
		}
		a, write, err := next(pod)
		if err != nil || !write {
			return err
		}
		return c.patchRecord(ctx, pod, a)
	})
}

// patchRecord writes a as pod's record, conditional on the record pod
// carries: a JSON patch that tests the pod's UID and the record's value
// before replacing it, so writes of other fields meanwhile (the kubelet's
// status, other annotations) do not refuse it, and a record changed
// meanwhile does (a conflict, as the caller reads again). A pod without a
// record (repair) is written conditional on its resourceVersion.
func (c *Cluster) patchRecord(ctx context.Context, pod *corev1.Pod, a api.Assignment) error {
	s, err := api.EncodeAssignment(a)
	if err != nil {
		return err
	}
	key := c.names.AnnotationAssignment()
	old, had := pod.Annotations[key]
	var patch []byte
	pt := types.JSONPatchType
	if had {
		path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
		patch, err = json.Marshal([]map[string]string{
			{"op": "test", "path": "/metadata/uid", "value": string(pod.UID)},
			{"op": "test", "path": path, "value": old},
			{"op": "replace", "path": path, "value": s},
		})
	} else {
		pt = types.MergePatchType
		patch, err = json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"annotations":     map[string]string{key: s},
		}})
	}
	if err != nil {
		return err
	}
	wrote, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, pt, patch, metav1.PatchOptions{})
	if err == nil {
		c.mu.Lock()
		c.written[pod.UID] = wrote.ResourceVersion
		c.mu.Unlock()
	}
	if had && apierrors.IsInvalid(err) {
		// The API server answers a failed test 422 with a generic message:
		// the record (or the pod) is not the one read, or the write is
		// invalid; the caller reads the pod again (a few times at most).
		return apierrors.NewConflict(corev1.Resource("pods"), pod.Name, fmt.Errorf("the record changed since it was read, or the write is invalid: %w", err))
	}
	return err
}

// Publish writes the inventory annotation and the GPU labels on the Node,
// and with recordKey (the plugin's node record key, api.NodeKeyAnnotation)
// the record-key annotation. A merge patch of those keys only: nothing else
// on the Node is touched and concurrent writers of other keys do not
// conflict.
func (c *Cluster) Publish(ctx context.Context, inv api.Inventory, recordKey string) error {
	s, err := api.EncodeInventory(inv)
	if err != nil {
		return err
	}
	annotations := map[string]string{c.names.AnnotationInventory(): s}
	if recordKey != "" {
		annotations[c.names.AnnotationRecordKey()] = recordKey
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": annotations,
		"labels":      Labels(c.names, inv),
	}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("publish inventory on Node %q: %w", c.node, err)
	}
	return nil
}

// Labels are the node labels for inv: card count, model ("mixed" when the
// cards differ) and the largest card's memory in the inventory's unit, e.g.
// "40GiB". Model and memory are nil (removed) on a node without cards.
func Labels(names api.Names, inv api.Inventory) map[string]*string {
	str := func(s string) *string { return &s }
	out := map[string]*string{names.LabelGPUCount(): str(strconv.Itoa(len(inv.Cards))), names.LabelGPUModel(): nil, names.LabelGPUMemory(): nil}
	if len(inv.Cards) == 0 {
		return out
	}
	model := inv.Cards[0].Model
	var largest int64
	for _, card := range inv.Cards {
		if card.Model != model {
			model = "mixed"
		}
		if card.Units > largest {
			largest = card.Units
		}
	}
	out[names.LabelGPUModel()] = str(api.SanitizeLabelValue(model))
	out[names.LabelGPUMemory()] = str(strconv.FormatInt(largest, 10) + string(inv.Unit))
	return out
}
