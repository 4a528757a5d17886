package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// Whole cards: the second resource (api.Names.WholeResourceName) from the same
// cards, on its own socket and registration (Config.WholeCards, Run). One
// kubelet device per card, its ID the card's UUID.
//
// The kubelet keeps two accounts, one per resource, and knows nothing of
// their sharing a card. The plugin keeps them apart (docs/protocol.md, "Whole
// cards"):
//   - Allocate refuses, FailedPrecondition, whole cards of which any unit is
//     held, and units of a card held whole; the kubelet fails that pod
//     (UnexpectedAdmissionError) and hands nothing out. "Held" is what the
//     plugin knows (cardUse): both ledgers, merged with both kubelet
//     accounts (PodResources) read before the decision, and, for containers
//     neither ledger shows (a plugin restart without PodResources), the
//     Allocated records of the pods that still hold their cards.
//   - ListAndWatch steers the kubelet away from those calls: a card's
//     whole-card device is Unhealthy while units of it are held, and its
//     units are Unhealthy while it is held whole, so the kubelet neither
//     offers them nor counts them allocatable.
//   - GetPreferredAllocation steers to the cards the extender assigned.

// Environment of a container given whole cards (besides NVIDIA_VISIBLE_DEVICES).
const (
	// envWholeCards is the number of cards the container holds whole.
	envWholeCards = api.EnvWholeCards
)

// errWholeID: a whole-card device ID the plugin does not advertise.
var errWholeID = errors.New("not a whole-card device of this plugin")

// errCardInUse: the cards are held the other way (a refusal that keeps the
// two accounts apart); FailedPrecondition.
var errCardInUse = errors.New("card in use the other way")

// wholeHolding is one container's whole cards, as the plugin knows them.
type wholeHolding struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
	// Cards are the card UUIDs, sorted.
	Cards []string
	// Guess: the plugin's decision at Allocate, not (yet) in the kubelet's
	// account; Gen is the ledger generation it was made at.
	Guess bool
	Gen   uint64
}

// wholeLedger remembers which container holds which cards whole, and which
// pods the plugin refused. Safe for concurrent use.
type wholeLedger struct {
	mu       sync.Mutex
	gen      uint64
	byCont   map[ckey]wholeHolding
	rejected map[types.UID]bool
	reopened map[types.UID]bool
}

func newWholeLedger() *wholeLedger {
	return &wholeLedger{byCont: map[ckey]wholeHolding{}, rejected: map[types.UID]bool{}, reopened: map[types.UID]bool{}}
}

func (l *wholeLedger) generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// guess records the plugin's decision.
func (l *wholeLedger) guess(h wholeHolding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	h.Guess, h.Gen = true, l.gen
	l.setLocked(h)
}

// confirm records h from a kubelet account read that started at readGen; a
// guess newer than the read is kept.
func (l *wholeLedger) confirm(h wholeHolding, readGen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, o := range l.byCont {
		if o.Guess && o.Gen > readGen && (k == (ckey{h.UID, h.Container}) || overlaps(o.Cards, h.Cards)) {
			return
		}
	}
	h.Guess, h.Gen = false, 0
	l.setLocked(h)
}

// setLocked records h, dropping any other container recorded on its cards
// (a guess the truth corrects: that pod is reopened).
func (l *wholeLedger) setLocked(h wholeHolding) {
	k := ckey{h.UID, h.Container}
	for ok, o := range l.byCont {
		if ok != k && overlaps(o.Cards, h.Cards) {
			delete(l.byCont, ok)
			l.reopened[ok.uid] = true
		}
	}
	l.byCont[k] = h
	delete(l.reopened, h.UID)
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func (l *wholeLedger) get(uid types.UID, container string) (wholeHolding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.byCont[ckey{uid, container}]
	return h, ok
}

// byCards is the container holding exactly these cards.
func (l *wholeLedger) byCards(cards []string) (wholeHolding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.byCont {
		if slices.Equal(h.Cards, cards) {
			return h, true
		}
	}
	return wholeHolding{}, false
}

func (l *wholeLedger) all() []wholeHolding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]wholeHolding, 0, len(l.byCont))
	for _, h := range l.byCont {
		out = append(out, h)
	}
	return out
}

func (l *wholeLedger) reject(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected[uid] = true
}

func (l *wholeLedger) isRejected(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejected[uid]
}

// reopen marks the pod reopened: its record drops back to Assigned at its
// next write.
func (l *wholeLedger) reopen(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reopened[uid] = true
}

func (l *wholeLedger) isReopened(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reopened[uid]
}

// retain forgets pods not in live.
func (l *wholeLedger) retain(live map[types.UID]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.byCont {
		if !live[k.uid] {
			delete(l.byCont, k)
		}
	}
	for _, m := range []map[types.UID]bool{l.rejected, l.reopened} {
		for uid := range m {
			if !live[uid] {
				delete(m, uid)
			}
		}
	}
}

// all returns every unit holding the ledger knows.
func (l *ledger) all() []holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]holding, 0, len(l.byCont))
	for _, h := range l.byCont {
		out = append(out, h)
	}
	return out
}

// broadcast wakes every waiter at each notify.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// cardUse is which cards are held, and by whom, the one way or the other.
type cardUse struct {
	// shared: card UUID → a holder of units of it ("ns/pod container c").
	shared map[string]string
	// whole: card UUID → the holder of the card whole.
	whole map[string]string
}

// inUse reports whether any of the cards is held, either way.
func (u cardUse) inUse(cards []string) bool {
	for _, c := range cards {
		_, shared := u.shared[c]
		_, whole := u.whole[c]
		if shared || whole {
			return true
		}
	}
	return false
}

// cardUse is what the plugin knows to be held on each card (callers hold
// allocMu or accept a moment's staleness): the holdings of both ledgers of
// pods that still hold their devices (api.HoldsUnits), and, for containers
// neither ledger shows, the Allocated records of such pods.
func (p *Plugin) cardUse(v podView) cardUse {
	u := cardUse{shared: map[string]string{}, whole: map[string]string{}}
	name := func(ns, pod, container string) string { return ns + "/" + pod + " container " + container }
	seen := map[ckey]bool{}
	for _, h := range p.ledger.all() {
		if pod := v.byUID[h.UID]; api.HoldsUnits(pod) {
			u.shared[h.Card] = name(h.Namespace, h.Pod, h.Container)
			seen[ckey{h.UID, h.Container}] = true
		}
	}
	for _, h := range p.whole.all() {
		if pod := v.byUID[h.UID]; api.HoldsUnits(pod) {
			for _, c := range h.Cards {
				u.whole[c] = name(h.Namespace, h.Pod, h.Container)
			}
			seen[ckey{h.UID, h.Container}] = true
		}
	}
	for _, pod := range v.pods {
		if !api.HoldsUnits(pod) {
			continue
		}
		a, err := p.record(pod)
		if err != nil || a.Phase != api.PhaseAllocated {
			continue
		}
		for _, c := range a.Containers {
			if !seen[ckey{pod.UID, c.Name}] {
				u.shared[c.CardUUID] = name(pod.Namespace, pod.Name, c.Name)
			}
		}
		for _, w := range a.WholeCards {
			if !seen[ckey{pod.UID, w.Name}] {
				for _, c := range w.CardUUIDs {
					u.whole[c] = name(pod.Namespace, pod.Name, w.Name)
				}
			}
		}
	}
	return u
}

// wholeAccount is one read of the kubelet's whole-card account.
type wholeAccount struct {
	holdings []wholeHolding
	gen      uint64
}

// readWholeAccount reads the kubelet's account of whole cards
// (Config.WholePodResources), without allocMu; false when there is none.
func (p *Plugin) readWholeAccount(ctx context.Context) (wholeAccount, bool) {
	if p.cfg.WholePodResources == nil {
		return wholeAccount{}, false
	}
	acct := wholeAccount{gen: p.whole.generation()}
	pods, err := p.cluster.Pods()
	if err != nil {
		return wholeAccount{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	hs, err := p.cfg.WholePodResources.Get(ctx, pods)
	if errors.Is(err, ErrGetDisabled) {
		p.getDisabled.Do(func() { p.log.Error(err, "Deciding on the plugin's own memory") })
		return wholeAccount{}, false
	}
	if err != nil {
		p.log.V(2).Info("PodResources unavailable for whole cards; deciding on the plugin's own memory", "err", err)
		return wholeAccount{}, false
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	for _, h := range hs {
		pod, ok := byName[h.Namespace+"/"+h.Pod]
		if !ok {
			continue
		}
		cards := append([]string(nil), h.IDs...)
		sort.Strings(cards)
		acct.holdings = append(acct.holdings, wholeHolding{Namespace: h.Namespace, Pod: h.Pod, UID: pod.UID, Container: h.Container, Cards: cards})
	}
	return acct, true
}

// mergeWhole puts a whole-card account into the ledger (callers hold allocMu).
func (p *Plugin) mergeWhole(acct wholeAccount) {
	for _, h := range acct.holdings {
		p.whole.confirm(h, acct.gen)
	}
}

// refuseHeldWhole refuses a units Allocate whose card is held whole (the
// kubelet's two accounts never hand out one card both ways). Called without
// allocMu.
func (p *Plugin) refuseHeldWhole(ctx context.Context, cards []string) error {
	wacct, waccount := p.readWholeAccount(ctx)
	p.allocMu.Lock()
	v, err := p.view()
	if err != nil {
		p.allocMu.Unlock()
		return err
	}
	if waccount {
		p.mergeWhole(wacct)
	}
	use := p.cardUse(v)
	p.allocMu.Unlock()
	for _, c := range cards {
		if holder, ok := use.whole[c]; ok {
			return fmt.Errorf("%w: card %s is held whole (%s) by pod %s; none of its %s units can be allocated until that pod ends", errCardInUse, c, p.cfg.Names.WholeResourceName(), holder, p.cfg.Names.ResourceName())
		}
	}
	return nil
}

// wholeServer is the device plugin service of the whole-card resource.
type wholeServer struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin
}

// wholeOptions: no PreStartContainer (Allocate writes the record, and
// reconciliation corrects it from the kubelet's account).
func wholeOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// GetDevicePluginOptions implements the device plugin API.
func (s *wholeServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return wholeOptions(), nil
}

// PreStartContainer implements the device plugin API (not required).
func (s *wholeServer) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// WholeDevices is the whole-card device list: one device per card, its ID
// the card's UUID; Unhealthy when the card is not healthy or units of it
// are held (cardUse).
func (p *Plugin) WholeDevices() []*pluginapi.Device {
	var use cardUse
	if v, err := p.view(); err == nil {
		use = p.cardUse(v)
	}
	inv := p.store.Inventory()
	out := make([]*pluginapi.Device, 0, len(inv.Cards))
	for _, c := range inv.Cards {
		health := pluginapi.Healthy
		if _, shared := use.shared[c.UUID]; shared || !c.Schedulable() {
			health = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: c.UUID, Health: health})
	}
	return out
}

// unitDevices is the units' device list: the store's, with the units of a
// card held whole Unhealthy.
func (p *Plugin) unitDevices() []*pluginapi.Device {
	devs := p.store.Devices()
	v, err := p.view()
	if err != nil {
		return devs
	}
	use := p.cardUse(v)
	if len(use.whole) == 0 {
		return devs
	}
	for _, d := range devs {
		if card, _, err := api.ParseUnitID(d.ID); err == nil {
			if _, ok := use.whole[card]; ok {
				d.Health = pluginapi.Unhealthy
			}
		}
	}
	return devs
}

// sameDevices reports whether two device lists are equal.
func sameDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Health != b[i].Health {
			return false
		}
	}
	return true
}

// ListAndWatch sends the whole-card devices, then again whenever they change
// (card state, or cards taken or released the other way).
func (s *wholeServer) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	var last []*pluginapi.Device
	for {
		changed, held := s.p.store.Changed(), s.p.held.wait()
		devs := s.p.WholeDevices()
		if last == nil || !sameDevices(devs, last) {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
			last = devs
		}
		select {
		case <-changed:
		case <-held:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// checkWholeIDs checks that ids name distinct cards the plugin advertises,
// and returns them sorted.
func (p *Plugin) checkWholeIDs(ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no device IDs", errWholeID)
	}
	out := append([]string(nil), ids...)
	sort.Strings(out)
	for i, id := range out {
		if _, ok := p.store.Card(id); !ok {
			return nil, fmt.Errorf("%w: device ID %q is not the UUID of a card on this node; %s devices are card UUIDs such as GPU-…", errWholeID, id, p.cfg.Names.WholeResourceName())
		}
		if i > 0 && out[i-1] == id {
			return nil, fmt.Errorf("%w: card %s appears twice", errWholeID, id)
		}
	}
	return out, nil
}

// wholeEntry is a container waiting for its whole cards.
type wholeEntry struct {
	pod       *corev1.Pod
	container string
	cards     int
	// assigned are the cards its record names (nil: no valid record);
	// err says why the pod gets no card (no valid record, a broken request).
	assigned []string
	err      error
}

// wholePending is the queue of whole-card containers not yet allocated, in
// the kubelet's admission order (creation time, arrival, UID; init
// containers, then app containers, in spec order).
//
// A pod the kubelet admitted (container statuses, Running) waits for
// nothing; without the kubelet's account (account false), neither does a
// pod whose record is Allocated and not reopened: its containers hold their
// cards (re-allocations of those are repeats, decideWhole).
func (p *Plugin) wholePending(v podView, account bool) []wholeEntry {
	pods := slices.Clone(v.pods)
	arrival := func(uid types.UID) uint64 {
		if n, ok := p.cluster.Arrival(uid); ok {
			return n
		}
		return ^uint64(0)
	}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if x, y := arrival(a.UID), arrival(b.UID); x != y {
			return x < y
		}
		return a.UID < b.UID
	})
	var out []wholeEntry
	for _, pod := range pods {
		admitted := api.Admitted(pod)
		if !api.MayStartContainers(pod) || p.whole.isRejected(pod.UID) || admitted {
			continue
		}
		_, reqErr := p.cfg.Names.RequestFromPod(pod)
		a, recErr := p.record(pod)
		if recErr == nil && a.Phase == api.PhaseAllocated && !account && !p.whole.isReopened(pod.UID) {
			continue
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			q, ok := c.Resources.Limits[p.cfg.Names.WholeResourceName()]
			if !ok {
				q, ok = c.Resources.Requests[p.cfg.Names.WholeResourceName()]
			}
			if !ok {
				continue
			}
			if _, held := p.whole.get(pod.UID, c.Name); held {
				continue
			}
			e := wholeEntry{pod: pod, container: c.Name, cards: int(q.Value())}
			switch {
			case reqErr != nil:
				e.err = fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, reqErr)
			case recErr != nil:
				e.err = fmt.Errorf("pod %s/%s has no gpushare assignment: pods requesting %s must be scheduled by gpushare-scheduler (%v)", pod.Namespace, pod.Name, p.cfg.Names.WholeResourceName(), recErr)
			default:
				if w, ok := a.WholeCard(c.Name); ok {
					e.assigned = slices.Sorted(slices.Values(w.CardUUIDs))
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// GetPreferredAllocation steers the kubelet to the cards the extender
// assigned to the first waiting container of that size; else to available
// cards nothing else uses, lowest index first.
// Like the units' (preferredSnapshot), it first waits up to
// Config.AllocateWait for a waiting container of each requested size: the
// kubelet may ask before the pod reaches the plugin's informer.
func (s *wholeServer) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p := s.p
	var sizes []int
	for _, cr := range req.GetContainerRequests() {
		sizes = append(sizes, int(cr.GetAllocationSize()))
	}
	pending, use, err := p.wholePreferredState(ctx, sizes)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		size := int(cr.GetAllocationSize())
		avail := cr.GetAvailableDeviceIDs()
		var ids []string
		for _, e := range pending {
			if e.cards != size {
				continue
			}
			if e.assigned != nil && len(e.assigned) == size && containsAll(avail, e.assigned) && containsAll(e.assigned, cr.GetMustIncludeDeviceIDs()) && !use.inUse(e.assigned) {
				ids = e.assigned
			}
			break
		}
		if ids == nil {
			ids = append(ids, cr.GetMustIncludeDeviceIDs()...)
			for _, c := range p.store.Cards() {
				if len(ids) >= size {
					break
				}
				if !use.inUse([]string{c.UUID}) && slices.Contains(avail, c.UUID) && !slices.Contains(ids, c.UUID) {
					ids = append(ids, c.UUID)
				}
			}
			if len(ids) != size {
				ids = nil
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// wholePreferredState is what the whole-card GetPreferredAllocation decides
// on: the waiting containers and the cards' use, once a waiting container of
// each size is there, or after Config.AllocateWait, or when the kubelet gives
// up. allocMu is taken for each look and released while waiting.
func (p *Plugin) wholePreferredState(ctx context.Context, sizes []int) ([]wholeEntry, cardUse, error) {
	var pending []wholeEntry
	var use cardUse
	err := p.waitForView(ctx, func(v podView) bool {
		pending = p.wholePending(v, p.cfg.WholePodResources != nil)
		use = p.cardUse(v)
		return wholeExplains(pending, sizes)
	})
	if err != nil {
		return nil, cardUse{}, err
	}
	return pending, use, nil
}

// wholeExplains reports whether each size has a waiting container of its
// own asking for that many cards.
func wholeExplains(pending []wholeEntry, sizes []int) bool {
	have := make([]int, len(pending))
	for i, e := range pending {
		have[i] = e.cards
	}
	return allocate.EachSizeOnce(have, sizes)
}

func containsAll(set, xs []string) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// Allocate gives each container request its whole cards: it refuses cards
// of which units are held, finds the container the call is for (the first
// waiting container of that size; a container already holding exactly these
// cards is a repeat), records the holding and, after the lock, the pod's
// record.
func (s *wholeServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p := s.p
	for _, cr := range req.GetContainerRequests() {
		if _, err := p.checkWholeIDs(cr.GetDevicesIds()); err != nil {
			p.log.Error(err, "Allocate of whole cards refused", "devices", cr.GetDevicesIds())
			return nil, toStatus(err)
		}
	}
	acct, account := p.readAccount(ctx)
	wacct, waccount := p.readWholeAccount(ctx)
	resp := &pluginapi.AllocateResponse{}
	var writes []podRef
	defer p.held.notify()
	for _, cr := range req.GetContainerRequests() {
		cards, ref, err := p.decideWholeWaiting(ctx, cr.GetDevicesIds(), acct, account, wacct, waccount)
		if err != nil {
			p.log.Error(err, "Allocate of whole cards refused", "devices", cr.GetDevicesIds())
			p.writeRecords(ctx, writes)
			return nil, toStatus(err)
		}
		if ref.UID != "" {
			writes = append(writes, ref)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, p.wholeResponse(cards))
	}
	p.writeRecords(ctx, writes)
	select {
	case p.reconcile <- struct{}{}:
	default:
	}
	return resp, nil
}

// decideWholeWaiting is decideWhole, waiting up to Config.AllocateWait for a
// pod the kubelet knows before the plugin's informer does.
func (p *Plugin) decideWholeWaiting(ctx context.Context, ids []string, acct account, account bool, wacct wholeAccount, waccount bool) ([]nvml.Card, podRef, error) {
	deadline := p.cfg.Clock.Now().Add(p.cfg.AllocateWait)
	for {
		cards, ref, err := p.decideWhole(ids, acct, account, wacct, waccount)
		if !errors.Is(err, errNoWholePending) || p.cfg.AllocateWait <= 0 || !p.cfg.Clock.Now().Before(deadline) {
			return cards, ref, err
		}
		select {
		case <-ctx.Done():
			return cards, ref, err
		case <-p.cfg.Clock.After(allocatePoll):
		}
	}
}

// errNoWholePending: no waiting container asks for that many whole cards.
var errNoWholePending = errors.New("no pod on this node waits for that many whole cards")

// errWholeNotScheduled: the container's pod has no valid record or breaks
// the contract; FailedPrecondition.
var errWholeNotScheduled = errors.New("whole cards refused")

// decideWhole is one whole-card decision, under allocMu.
func (p *Plugin) decideWhole(ids []string, acct account, account bool, wacct wholeAccount, waccount bool) ([]nvml.Card, podRef, error) {
	sorted, err := p.checkWholeIDs(ids)
	if err != nil {
		return nil, podRef{}, err
	}
	var cards []nvml.Card
	for _, id := range sorted {
		c, _ := p.store.Card(id)
		cards = append(cards, c)
	}
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	v, err := p.view()
	if err != nil {
		return nil, podRef{}, err
	}
	if account {
		p.merge(acct)
	}
	if waccount {
		p.mergeWhole(wacct)
	}
	// A container holding exactly these cards: a repeat (after a restart
	// too, from the kubelet's account).
	if h, ok := p.whole.byCards(sorted); ok && api.MayStartContainers(v.byUID[h.UID]) {
		p.log.Info("Allocate repeated for a container that holds these whole cards", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container)
		return cards, podRef{}, nil
	}
	// Without the kubelet's account, after a restart: an admitted container
	// whose record gives it exactly these cards is re-allocated.
	if !waccount {
		for _, pod := range v.pods {
			a, err := p.record(pod)
			if err != nil || !api.MayStartContainers(pod) {
				continue
			}
			for _, w := range a.WholeCards {
				if slices.Equal(slices.Sorted(slices.Values(w.CardUUIDs)), sorted) {
					admitted := api.Admitted(pod)
					if a.Phase != api.PhaseAllocated && !admitted {
						continue
					}
					p.whole.guess(wholeHolding{Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, Container: w.Name, Cards: sorted})
					p.log.Info("Allocate repeated for a container whose record holds these whole cards", "pod", klog.KObj(pod), "container", w.Name)
					return cards, podRef{}, nil
				}
			}
		}
	}
	use := p.cardUse(v)
	for _, id := range sorted {
		if holder, ok := use.shared[id]; ok {
			return nil, podRef{}, fmt.Errorf("%w: card %s holds %s units of pod %s; it cannot be given whole (%s) until they are released", errCardInUse, id, p.cfg.Names.ResourceName(), holder, p.cfg.Names.WholeResourceName())
		}
		if holder, ok := use.whole[id]; ok {
			return nil, podRef{}, fmt.Errorf("%w: card %s is already held whole by pod %s", errCardInUse, id, holder)
		}
	}
	for _, e := range p.wholePending(v, waccount) {
		if e.cards != len(sorted) {
			continue
		}
		if e.err != nil {
			p.whole.reject(e.pod.UID)
			return nil, podRef{}, fmt.Errorf("%w: %w", errWholeNotScheduled, e.err)
		}
		p.whole.guess(wholeHolding{Namespace: e.pod.Namespace, Pod: e.pod.Name, UID: e.pod.UID, Container: e.container, Cards: sorted})
		p.log.Info("Allocated whole cards", "pod", klog.KObj(e.pod), "container", e.container, "cards", sorted, "assignedCards", e.assigned, "corrected", !slices.Equal(e.assigned, sorted))
		return cards, podRef{Namespace: e.pod.Namespace, Name: e.pod.Name, UID: e.pod.UID}, nil
	}
	return nil, podRef{}, fmt.Errorf("%w: %d cards asked for (%s)", errNoWholePending, len(sorted), strings.Join(sorted, ","))
}

// wholeResponse is what a container given these cards whole gets: as for a
// share (response), one volume mount per card under
// api.VisibleDevicesVolumeRoot (or their IDs in NVIDIA_VISIBLE_DEVICES), and
// GPUSHARE_WHOLE_CARDS, GPUSHARE_CARD_UUID and GPUSHARE_CARD_INDEX with
// comma-separated lists. No MPS limit: the cards are the container's alone.
func (p *Plugin) wholeResponse(cards []nvml.Card) *pluginapi.ContainerAllocateResponse {
	var ids, uuids, indexes []string
	for _, c := range cards {
		id := c.UUID
		if p.cfg.DeviceIDStrategy == DeviceIDIndex {
			id = strconv.Itoa(c.Index)
		}
		ids = append(ids, id)
		uuids = append(uuids, c.UUID)
		indexes = append(indexes, strconv.Itoa(c.Index))
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		envWholeCards:    strconv.Itoa(len(cards)),
		api.EnvCardUUID:  strings.Join(uuids, ","),
		api.EnvCardIndex: strings.Join(indexes, ","),
	}}
	switch p.cfg.Strategy {
	case StrategyEnvvar:
		r.Envs[api.EnvNvidiaVisibleDevices] = strings.Join(ids, ",")
	default:
		r.Envs[api.EnvNvidiaVisibleDevices] = api.VisibleDevicesVolumeRoot
		for _, id := range ids {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: api.VisibleDevicesVolumeRoot + "/" + id, HostPath: "/dev/null", ReadOnly: true})
		}
	}
	return r
}

// applyWhole makes the whole-card entries of a match the ledger (part of
// applyLedger): a container the ledger shows holding cards gets those cards
// (sorted by index). It reports whether it changed a, and whether every
// whole-card container holds its cards.
func (p *Plugin) applyWhole(a *api.Assignment, uid types.UID) (changed, all bool) {
	all = true
	for i := range a.WholeCards {
		w := &a.WholeCards[i]
		h, ok := p.whole.get(uid, w.Name)
		if !ok {
			all = false
			continue
		}
		if slices.Equal(slices.Sorted(slices.Values(w.CardUUIDs)), h.Cards) {
			continue
		}
		var cards []nvml.Card
		for _, u := range h.Cards {
			if c, ok := p.store.Card(u); ok {
				cards = append(cards, c)
			}
		}
		if len(cards) != len(h.Cards) {
			continue
		}
		sort.Slice(cards, func(i, j int) bool { return cards[i].Index < cards[j].Index })
		w.CardUUIDs, w.CardIndexes = nil, nil
		for _, c := range cards {
			w.CardUUIDs = append(w.CardUUIDs, c.UUID)
			w.CardIndexes = append(w.CardIndexes, c.Index)
		}
		changed = true
	}
	return changed, all
}
