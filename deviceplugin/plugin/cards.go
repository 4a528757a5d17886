package plugin

import (
	"context"
	"errors"
	"slices"
	"sort"

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
type cards struct{ p *Plugin }

// cardOptions: no PreStartContainer (Allocate writes the record, and
// reconciliation corrects it from the kubelet's account).
var cardOptions = pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}

// wholeCards are the cards of a container in the kubelet's account, sorted.
func wholeCards(ids []string) ([]string, []string, error) {
	sorted := slices.Sorted(slices.Values(ids))
	return sorted, sorted, nil
}

// devices is the whole-card device list: one device per card, its ID the
// card's UUID; Unhealthy when the card is not healthy or units of it are
// held (cardUse).
func (k cards) devices() []*pluginapi.Device {
	p := k.p
	var use allocate.Use
	if v, err := p.view(); err == nil {
		use = p.cardUse(v)
	}
	inv := p.store.Inventory()
	out := make([]*pluginapi.Device, 0, len(inv.Cards))
	for _, c := range inv.Cards {
		health := pluginapi.Healthy
		if _, shared := use.Shared[c.UUID]; shared || !c.Schedulable() {
			health = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: c.UUID, Health: health})
	}
	return out
}

// parse checks that ids name distinct cards the plugin advertises.
func (k cards) parse(ids []string) (allocate.Cards, error) {
	known := func(id string) bool { _, ok := k.p.store.Card(id); return ok }
	return allocate.ParseCards(ids, known, string(k.p.cfg.Names.WholeResourceName()))
}

func (cards) admit(context.Context, []allocate.Cards) error { return nil }

// accounts: both resources' (a card is held the one way or the other).
func (k cards) accounts(ctx context.Context) accounts { return k.p.acct.readAccounts(ctx, true, true) }

// decide is one whole-card decision, under allocMu: a container holding
// exactly these cards is a repeat (after a restart too, from the kubelet's
// account); otherwise allocate.MatchCards.
func (k cards) decide(v podView, _ []types.UID, sorted allocate.Cards, accts accounts) (decision, error) {
	p := k.p
	var cs []nvml.Card
	for _, id := range sorted {
		c, _ := p.store.Card(id)
		cs = append(cs, c)
	}
	if h, ok := p.state.whole.byDeviceIDs(sorted); ok && api.MayStartContainers(v.byUID[h.UID]) {
		p.log.Info("Allocate repeated for a container that holds these whole cards", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container)
		return decision{cards: cs}, nil
	}
	snap := k.snapshot(v, accts.whole.ok, accts.whole.admitting)
	d, err := allocate.MatchCards(snap, sorted)
	if errors.Is(err, allocate.ErrCardsNotScheduled) {
		p.state.whole.reject(d.Entry.UID)
	}
	if err != nil {
		return decision{}, err
	}
	e := d.Entry
	p.state.whole.guess(holding{Namespace: e.Namespace, Pod: e.Pod, UID: e.UID, Container: e.Container, Cards: sorted, IDs: sorted})
	if d.Repeat {
		// Without the kubelet's account, after a restart: an admitted
		// container whose record gives it exactly these cards.
		p.log.Info("Allocate repeated for a container whose record holds these whole cards", "pod", klog.KRef(e.Namespace, e.Pod), "container", e.Container)
		return decision{cards: cs}, nil
	}
	p.log.Info("Allocated whole cards", "pod", klog.KRef(e.Namespace, e.Pod), "container", e.Container, "cards", sorted, "assignedCards", e.Assigned, "corrected", !slices.Equal(e.Assigned, sorted))
	return decision{cards: cs, write: podRef{Namespace: e.Namespace, Name: e.Pod, UID: e.UID}, pod: v.byUID[e.UID], container: e.Container, ids: sorted}, nil
}

// snapshot is the whole-card matching's view of the node (callers hold
// allocMu). account: the whole-card ledger holds the kubelet's account;
// admitting: the pods the kubelet is admitting (nil: not known).
func (k cards) snapshot(v podView, account bool, admitting func(types.UID) bool) allocate.CardSnapshot {
	p, l := k.p, k.p.state.whole
	allocated := func(uid types.UID, container string) bool { _, ok := l.get(uid, container); return ok }
	st := allocate.State{Allocated: allocated, Rejected: l.isRejected, Reopened: l.isReopened, KubeletAccount: account, Admitting: admitting, Arrival: p.cluster.Arrival, Keys: p.keys(), Names: p.cfg.Names}
	return allocate.BuildCards(v.pods, st, p.cardUse(v))
}

// respond is what a container given these cards whole gets (response.Config.Whole).
func (k cards) respond(d decision) *pluginapi.ContainerAllocateResponse {
	return k.p.cfg.Whole(d.cards)
}

// preferred steers the kubelet to the cards the extender assigned to the
// first waiting container of that size; else to available cards nothing
// else uses, lowest index first (allocate.PreferredCards). Like the units'
// (preferredSnapshot), it first waits up to Config.AllocateWait for a
// waiting container of each requested size: the kubelet may ask before the
// pod reaches the plugin's informer. allocMu is taken for each look and
// released while waiting.
func (k cards) preferred(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p := k.p
	var sizes []int
	for _, cr := range req.GetContainerRequests() {
		sizes = append(sizes, int(cr.GetAllocationSize()))
	}
	var snap allocate.CardSnapshot
	err := p.waitForView(ctx, accounts{}, func(v podView) bool {
		snap = k.snapshot(v, p.whole.res.podres != nil, nil)
		return allocate.CardsExplain(snap.Pending, sizes)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	var all []string
	for _, c := range p.store.Cards() {
		all = append(all, c.UUID)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := allocate.PreferredCards(snap.Pending, snap.Use, all, cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// preStart: not required of whole cards.
func (cards) preStart(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// applyWhole makes the whole-card entries of a match the ledger (part of
// applyLedger): a container the ledger shows holding cards gets those cards
// (sorted by index). It reports whether it changed a, and whether every
// whole-card container holds its cards.
func (p recorder) applyWhole(a *api.Assignment, uid types.UID) (changed, all bool) {
	all = true
	for i := range a.WholeCards {
		w := &a.WholeCards[i]
		h, ok := p.state.whole.get(uid, w.Name)
		if !ok {
			all = false
			continue
		}
		if slices.Equal(slices.Sorted(slices.Values(w.CardUUIDs)), h.Cards) {
			continue
		}
		var cs []nvml.Card
		for _, u := range h.Cards {
			if c, ok := p.store.Card(u); ok {
				cs = append(cs, c)
			}
		}
		if len(cs) != len(h.Cards) {
			continue
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].Index < cs[j].Index })
		w.CardUUIDs, w.CardIndexes = nil, nil
		for _, c := range cs {
			w.CardUUIDs = append(w.CardUUIDs, c.UUID)
			w.CardIndexes = append(w.CardIndexes, c.Index)
		}
		changed = true
	}
	return changed, all
}
