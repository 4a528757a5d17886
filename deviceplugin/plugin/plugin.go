// Package plugin is the gpushare kubelet device plugin: the gRPC service the
// kubelet calls (ListAndWatch, GetPreferredAllocation, Allocate), its
// registration with the kubelet and its re-registration when the kubelet
// restarts, and the reconciliation of pods' assignment records with what the
// kubelet actually allocated.
//
// Which container an Allocate is for is decided by package allocate over a
// snapshot of the pods bound to the node; this package supplies the snapshot,
// records the decision, answers the kubelet and patches the pod.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// Strategy is how a container is told which card it has.
type Strategy string

const (
	// StrategyVolumeMounts: NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices
	// and host /dev/null mounted at /var/run/nvidia-container-devices/<id>.
	StrategyVolumeMounts Strategy = "volume-mounts"
	// StrategyEnvvar: NVIDIA_VISIBLE_DEVICES=<id>.
	StrategyEnvvar Strategy = "envvar"
)

// ParseStrategy parses --pass-device-specs-strategy style names.
func ParseStrategy(s string) (Strategy, error) {
	switch v := Strategy(s); v {
	case StrategyVolumeMounts, StrategyEnvvar:
		return v, nil
	}
	return "", fmt.Errorf("unknown device list strategy %q: use %q or %q", s, StrategyVolumeMounts, StrategyEnvvar)
}

// DeviceIDStrategy is what names the card inside the container.
type DeviceIDStrategy string

const (
	// DeviceIDUUID names the card by its UUID (stable across reboots).
	DeviceIDUUID DeviceIDStrategy = "uuid"
	// DeviceIDIndex names the card by its node-local index.
	DeviceIDIndex DeviceIDStrategy = "index"
)

// ParseDeviceIDStrategy parses "uuid" or "index".
func ParseDeviceIDStrategy(s string) (DeviceIDStrategy, error) {
	switch v := DeviceIDStrategy(s); v {
	case DeviceIDUUID, DeviceIDIndex:
		return v, nil
	}
	return "", fmt.Errorf("unknown device ID strategy %q: use %q or %q", s, DeviceIDUUID, DeviceIDIndex)
}

// Config is the plugin's configuration.
type Config struct {
	// PluginDir is the kubelet's device-plugin directory.
	PluginDir string
	// SocketName is the plugin's socket file in PluginDir.
	SocketName string
	// Strategy and DeviceIDStrategy shape the container response.
	Strategy         Strategy
	DeviceIDStrategy DeviceIDStrategy
	// AllocateWait is how long Allocate waits for the pod it is for to reach
	// the plugin's pod cache (the kubelet may see a pod first).
	AllocateWait time.Duration
	// ReconcileInterval is how often records are reconciled with the kubelet.
	ReconcileInterval time.Duration
	// ListAndWatchGrace is how long after a registration the kubelet has to
	// open ListAndWatch before the plugin serves and registers again
	// (default 10 s; negative: never). A kubelet opens it at once; one that
	// does not has dropped the registration (see Run).
	ListAndWatchGrace time.Duration
}

// DefaultListAndWatchGrace is Config.ListAndWatchGrace's default.
const DefaultListAndWatchGrace = 10 * time.Second

// Cluster is what the plugin needs from the API server.
type Cluster interface {
	// Pods lists the pods bound to the node (an informer's cache).
	Pods() ([]*corev1.Pod, error)
	// UpdateAssignment applies mutate to the pod's assignment record.
	UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error
	// Arrival is the order in which the pod cache first saw the pod bound
	// to the node (false: not seen); see allocate.State.Arrival.
	Arrival(uid types.UID) (uint64, bool)
}

// Plugin serves the kubelet. Build it with New.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg     Config
	store   *inventory.Store
	cluster Cluster
	podres  PodResources // nil: the kubelet's PodResources API is not used
	log     klog.Logger

	allocMu   sync.Mutex
	ledger    *ledger
	reconcile chan struct{}

	registeredWith os.FileInfo // the kubelet.sock registered with (Run's goroutine only)
}

// New builds the plugin. podres may be nil.
func New(cfg Config, store *inventory.Store, cluster Cluster, podres PodResources, log klog.Logger) *Plugin {
	if cfg.SocketName == "" {
		cfg.SocketName = "gpushare.sock"
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginapi.DevicePluginPath
	}
	if cfg.Strategy == "" {
		cfg.Strategy = StrategyVolumeMounts
	}
	if cfg.DeviceIDStrategy == "" {
		cfg.DeviceIDStrategy = DeviceIDUUID
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 10 * time.Second
	}
	if cfg.ListAndWatchGrace == 0 {
		cfg.ListAndWatchGrace = DefaultListAndWatchGrace
	}
	return &Plugin{cfg: cfg, store: store, cluster: cluster, podres: podres, log: log, ledger: newLedger(), reconcile: make(chan struct{}, 1)}
}

// GetDevicePluginOptions implements the device plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// PreStartContainer implements the device plugin API (not requested).
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// ListAndWatch sends the device list, then again at every change of card
// state (health, isolation), until the kubelet or the server ends the stream.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		changed := p.store.Changed()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.store.Devices()}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// snapshot builds the matching's view of the node. account: the ledger is
// the kubelet's own account of what it has allocated (refreshFromKubelet).
func (p *Plugin) snapshot(account bool) (allocate.Snapshot, error) {
	pods, err := p.cluster.Pods()
	if err != nil {
		return allocate.Snapshot{}, err
	}
	return allocate.Build(pods, allocate.State{Allocated: p.ledger.has, Rejected: p.ledger.isRejected, Reopened: p.ledger.isEvicted, KubeletAccount: account, Arrival: p.cluster.Arrival}), nil
}

// podResourcesTimeout bounds one read of the kubelet's PodResources API.
const podResourcesTimeout = 5 * time.Second

// kubeletHoldings reads the kubelet's PodResources: which container of the
// pods in the cache holds which units. Containers of pods the cache does not
// know are left out.
func (p *Plugin) kubeletHoldings(ctx context.Context, pods []*corev1.Pod) ([]holding, error) {
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	hs, err := p.podres.List(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	out := make([]holding, 0, len(hs))
	for _, h := range hs {
		pod, ok := byName[h.Namespace+"/"+h.Pod]
		if !ok {
			continue
		}
		card, err := allocate.CardOf(h.IDs)
		if err != nil {
			p.log.Error(err, "Kubelet reports units of several cards for one container", "pod", klog.KObj(pod), "container", h.Container)
			continue
		}
		out = append(out, holding{Namespace: h.Namespace, Pod: h.Pod, UID: pod.UID, Container: h.Container, Card: card, IDs: h.IDs})
	}
	return out, nil
}

// refreshFromKubelet puts the kubelet's own account into the ledger before
// a decision (callers hold allocMu). The kubelet admits pods one at a time
// and records a container's units as soon as its Allocate returns, so when
// it asks about the next container, PodResources shows every container it
// has allocated so far: those are not pending, whatever the plugin guessed
// (a guess the account contradicts is dropped and its pod is pending again),
// and the only unknown left is which of the still-pending containers this
// call is for. false: no PodResources, or it failed (the ledger then holds
// only the plugin's own decisions).
func (p *Plugin) refreshFromKubelet(ctx context.Context) bool {
	if p.podres == nil {
		return false
	}
	pods, err := p.cluster.Pods()
	if err != nil {
		return false
	}
	hs, err := p.kubeletHoldings(ctx, pods)
	if err != nil {
		p.log.V(2).Info("PodResources unavailable; matching on the plugin's own decisions", "err", err)
		return false
	}
	for _, h := range hs {
		p.ledger.set(h)
	}
	return true
}

// GetPreferredAllocation steers the kubelet to units of the card assigned to
// the container it is about to allocate (allocate.Preferred).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	snap, err := p.snapshot(p.refreshFromKubelet(ctx))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "pod cache: %v", err)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := allocate.Preferred(snap, cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate answers the kubelet for each container request: which container
// it is for (allocate.Match), what the container gets, and the record.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	// Once per call: a second container of the same call is not yet in the
	// kubelet's account, and must not lose the first one's decision.
	account := p.refreshFromKubelet(ctx)
	for _, cr := range req.GetContainerRequests() {
		r, err := p.allocateOne(ctx, cr.GetDevicesIds(), account)
		if err != nil {
			p.log.Error(err, "Allocate refused", "devices", len(cr.GetDevicesIds()))
			return nil, toStatus(err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	select {
	case p.reconcile <- struct{}{}:
	default:
	}
	return resp, nil
}

// errUnknownCard: the IDs name a card this plugin does not advertise.
var errUnknownCard = errors.New("device IDs name a card this plugin does not advertise")

// toStatus is the one place errors become gRPC status codes. The message is
// what the kubelet puts in the pod's UnexpectedAdmissionError event.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, allocate.ErrNotScheduled):
		code = codes.FailedPrecondition
	case errors.Is(err, allocate.ErrSpansCards), errors.Is(err, errUnknownCard), errors.Is(err, errNotAdvertised):
		code = codes.InvalidArgument
	case errors.Is(err, allocate.ErrNoPending):
		code = codes.NotFound
	}
	return status.Error(code, err.Error())
}

func (p *Plugin) allocateOne(ctx context.Context, ids []string, account bool) (*pluginapi.ContainerAllocateResponse, error) {
	cardUUID, err := allocate.CardOf(ids)
	if err != nil {
		return nil, err
	}
	card, ok := p.store.Card(cardUUID)
	if !ok {
		return nil, fmt.Errorf("%w: %s", errUnknownCard, cardUUID)
	}
	if err := checkAdvertised(card, p.store.Unit(), ids); err != nil {
		return nil, err
	}
	units := int64(len(ids))
	// With the kubelet's account, a container holding exactly these units is
	// a retry (after a plugin restart too); without it, the plugin's memory.
	if h, ok := p.ledger.byDeviceIDs(ids); ok && p.holds(h.UID) {
		p.log.Info("Allocate repeated for a container that holds these units", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container, "card", card.UUID, "kubeletAccount", account)
		return p.response(card, units), nil
	}
	snap, err := p.snapshot(account)
	if err != nil {
		return nil, err
	}
	d, err := allocate.Match(snap, ids)
	if errors.Is(err, allocate.ErrNoPending) && p.cfg.AllocateWait > 0 {
		// The kubelet may know the pod before the informer does: wait for it.
		deadline := time.Now().Add(p.cfg.AllocateWait)
		for errors.Is(err, allocate.ErrNoPending) && time.Now().Before(deadline) && ctx.Err() == nil {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			if snap, err = p.snapshot(account); err == nil {
				d, err = allocate.Match(snap, ids)
			}
		}
	}
	if errors.Is(err, allocate.ErrNotScheduled) {
		p.ledger.reject(d.Entry.UID)
	}
	if err != nil {
		return nil, err
	}
	e := d.Entry
	p.ledger.set(holding{Namespace: e.Namespace, Pod: e.Pod, UID: e.UID, Container: e.Container, Card: d.CardUUID, IDs: append([]string(nil), ids...)})
	p.log.Info("Allocated", "pod", klog.KRef(e.Namespace, e.Pod), "container", e.Container, "units", units, "card", card.UUID, "cardIndex", card.Index, "assignedCard", e.Assigned.CardUUID, "corrected", d.Corrected, "repeat", d.Repeat)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.writeRecord(pctx, e.Namespace, e.Pod, e.UID); err != nil {
		// The container gets its units anyway; reconciliation retries the record.
		p.log.Error(err, "Recording the allocation failed; will retry", "pod", klog.KRef(e.Namespace, e.Pod))
	}
	return p.response(card, units), nil
}

// holds reports whether the pod with this UID can still hold units: it is in
// the pod cache, not terminal and not being deleted. Units of a pod that is
// gone are free; the kubelet may hand the same IDs to the next pod.
func (p *Plugin) holds(uid types.UID) bool {
	pods, err := p.cluster.Pods()
	if err != nil {
		return false
	}
	for _, pod := range pods {
		if pod.UID == uid {
			return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
		}
	}
	return false
}

// writeRecord makes the pod's assignment match the ledger: each container
// the ledger knows gets the card it holds, and the phase becomes Allocated
// once every container is known.
func (p *Plugin) writeRecord(ctx context.Context, namespace, name string, uid types.UID) error {
	held := p.ledger.forPod(uid)
	if len(held) == 0 && !p.ledger.isEvicted(uid) {
		return nil
	}
	evicted := p.ledger.isEvicted(uid)
	return p.cluster.UpdateAssignment(ctx, namespace, name, uid, func(a *api.Assignment) bool {
		return p.applyHoldings(a, held, evicted)
	})
}

// applyHoldings makes a match the ledger. evicted: the plugin learnt that a
// container of this pod does not hold what it guessed, so a record it had
// marked Allocated goes back to Assigned until the kubelet allocates again.
func (p *Plugin) applyHoldings(a *api.Assignment, held map[string]holding, evicted bool) bool {
	changed := false
	all := true
	for i := range a.Containers {
		c := &a.Containers[i]
		h, ok := held[c.Name]
		if !ok {
			all = false
			continue
		}
		if c.CardUUID != h.Card {
			card, ok := p.store.Card(h.Card)
			if !ok {
				continue
			}
			c.CardUUID, c.CardIndex = card.UUID, card.Index
			changed = true
		}
	}
	if all && a.Phase != api.PhaseAllocated {
		a.Phase = api.PhaseAllocated
		changed = true
	}
	if !all && evicted && a.Phase == api.PhaseAllocated {
		a.Phase = api.PhaseAssigned
		changed = true
	}
	return changed
}

// response is what the container gets for units of card.
func (p *Plugin) response(card nvml.Card, units int64) *pluginapi.ContainerAllocateResponse {
	id := card.UUID
	if p.cfg.DeviceIDStrategy == DeviceIDIndex {
		id = strconv.Itoa(card.Index)
	}
	unit := p.store.Unit()
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		api.EnvMemoryUnits:   strconv.FormatInt(units, 10),
		api.EnvMemoryUnit:    string(unit),
		api.EnvMemoryMiB:     strconv.FormatInt(units*unit.MiB(), 10),
		api.EnvCardMemoryMiB: strconv.FormatInt(card.MemoryMiB, 10),
		api.EnvCardUUID:      card.UUID,
		api.EnvCardIndex:     strconv.Itoa(card.Index),
	}}
	switch p.cfg.Strategy {
	case StrategyEnvvar:
		r.Envs[api.EnvNvidiaVisibleDevices] = id
	default:
		r.Envs[api.EnvNvidiaVisibleDevices] = api.VisibleDevicesVolumeRoot
		r.Mounts = []*pluginapi.Mount{{ContainerPath: api.VisibleDevicesVolumeRoot + "/" + id, HostPath: "/dev/null", ReadOnly: true}}
	}
	return r
}

// Reconcile makes the pods' records match what the kubelet allocated: it
// reads the kubelet's PodResources (when configured) into the ledger, which
// corrects the plugin's guesses, then patches every record that differs.
func (p *Plugin) Reconcile(ctx context.Context) error {
	pods, err := p.cluster.Pods()
	if err != nil {
		return err
	}
	byUID := map[types.UID]*corev1.Pod{}
	live := map[types.UID]bool{}
	for _, pod := range pods {
		byUID[pod.UID] = pod
		live[pod.UID] = true
	}
	// Under allocMu: the kubelet's account read here must not be applied
	// over a decision an Allocate makes in between. It is merged, not
	// replaced: the kubelet records a container's units only after the
	// Allocate it answers, so the latest decision may not be in it yet.
	p.allocMu.Lock()
	if p.podres != nil {
		hs, err := p.kubeletHoldings(ctx, pods)
		if err != nil {
			p.log.V(2).Info("PodResources unavailable; records follow the plugin's own decisions", "err", err)
		}
		for _, h := range hs {
			if _, aerr := api.AssignmentFromPod(byUID[h.UID]); aerr != nil {
				p.log.Error(aerr, "A container holds gpu-mem units without a gpushare assignment", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container, "card", h.Card)
			}
			p.ledger.set(h)
		}
	}
	p.ledger.retain(live)
	p.allocMu.Unlock()
	var errs []error
	for _, pod := range pods {
		held := p.ledger.forPod(pod.UID)
		evicted := p.ledger.isEvicted(pod.UID)
		if len(held) == 0 && !evicted {
			continue
		}
		a, err := api.AssignmentFromPod(pod)
		if err != nil {
			continue
		}
		if !p.applyHoldings(&a, held, evicted) {
			continue // the cached record already matches
		}
		if err := p.writeRecord(ctx, pod.Namespace, pod.Name, pod.UID); err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

// RunReconciler reconciles after every Allocate and every ReconcileInterval
// until ctx is done.
func (p *Plugin) RunReconciler(ctx context.Context) {
	t := time.NewTicker(p.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.reconcile:
		}
		if err := p.Reconcile(ctx); err != nil {
			p.log.Error(err, "Reconciling assignment records")
		}
	}
}
