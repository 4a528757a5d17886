package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
)

// units is the kind of the gpu-mem resource (api.Names.ResourceName): one
// kubelet device per unit of memory of a card, api.UnitID(card, n).
type units struct{ p *Plugin }

// unitOptions: PreStartRequired, the kubelet calls PreStartContainer, and
// waits for it, before it starts each container; the plugin writes the
// container's true record there (see preStart).
var unitOptions = pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true, PreStartRequired: true}

// unitCards is the card of a container's units in the kubelet's account.
func unitCards(ids []string) ([]string, []string, error) {
	card, err := allocate.CardOf(ids)
	return []string{card}, ids, err
}

// devices is the units' device list: the store's, with the units of a card
// held whole Unhealthy.
func (k units) devices() []*pluginapi.Device {
	p := k.p
	devs := p.store.Devices()
	v, err := p.view()
	if err != nil {
		return devs
	}
	use := p.cardUse(v)
	if len(use.Whole) == 0 {
		return devs
	}
	for _, d := range devs {
		if card, _, err := api.ParseUnitID(d.ID); err == nil {
			if _, ok := use.Whole[card]; ok {
				d.Health = pluginapi.Unhealthy
			}
		}
	}
	return devs
}

func (units) parse(ids []string) (allocate.Units, error) { return allocate.ParseUnits(ids) }

// admit refuses units of a card held whole (the kubelet's two accounts
// never hand out one card both ways), then retries the swaps
// reconciliation left for the kubelet's next call (see swap).
func (k units) admit(ctx context.Context, reqs []allocate.Units) error {
	p := k.p
	accts := p.acct.readAccounts(ctx, false, true)
	var use allocate.Use
	if err := p.locked(accts, func(v podView, _ []types.UID) { use = p.cardUse(v) }); err != nil {
		return err
	}
	for _, r := range reqs {
		if holder, ok := use.Whole[r.Card]; ok {
			return fmt.Errorf("%w: card %s is held whole (%s) by pod %s; none of its %s units can be allocated until that pod ends", allocate.ErrCardInUse, r.Card, p.cfg.Names.WholeResourceName(), holder, p.cfg.Names.ResourceName())
		}
	}
	p.rec.swapDeferred(ctx)
	return nil
}

func (k units) accounts(ctx context.Context) accounts { return k.p.acct.readAccounts(ctx, true, false) }

func (k units) respond(d decision) *pluginapi.ContainerAllocateResponse {
	return k.p.cfg.Share(d.cards[0], d.units, k.p.store.Unit())
}

// decide is one Allocate decision (callers hold allocMu; no I/O): a refusal of units the
// kubelet's account shows held by another live pod; else which container the IDs are for,
// recorded in the ledger, and whether its record is to be written (after the lock, with the
// pods reopened). A guess is not recorded for a pod the account already contradicted while
// another pending container of that size could as well be the one: it waits for the account.
func (k units) decide(v podView, reopenedUIDs []types.UID, u allocate.Units, accts accounts) (decision, error) {
	p, acct := k.p, accts.units
	if acct.ok {
		// The kubelet records a container's units as its Allocate returns: a guess older than
		// this read that the read does not show, of the pod the kubelet admits, is of a call it
		// never recorded (a pod not in the cache yet, a restart); kept, it would hide that pod.
		for _, pod := range v.pods {
			if acct.admitting(pod.UID) && !api.Admitted(pod) && p.state.units.forgetGuesses(pod.UID, acct.gen, false) {
				reopenedUIDs = append(reopenedUIDs, pod.UID)
			}
		}
		if h, exact, held := acct.heldByOther(v, u.IDs); held && p.acct.refuseHeld(v, h, exact) {
			return decision{reopened: v.refs(reopenedUIDs)}, heldErr(h, u.IDs)
		}
	}
	d, err := k.match(v, u, acct)
	d.reopened = v.refs(reopenedUIDs)
	return d, err
}

func (k units) match(v podView, u allocate.Units, acct account) (decision, error) {
	p := k.p
	card, ok := p.store.Card(u.Card)
	if !ok {
		return decision{}, fmt.Errorf("%w: %s", errUnknownCard, u.Card)
	}
	if err := checkAdvertised(card, p.store.Unit(), u); err != nil {
		return decision{}, err
	}
	n := u.Size()
	// With the kubelet's account, a container holding exactly these units is
	// a retry (after a plugin restart too); without it, the plugin's memory.
	if h, ok := p.state.units.byDeviceIDs(u.IDs); ok && api.MayStartContainers(v.byUID[h.UID]) {
		p.log.Info("Allocate repeated for a container that holds these units", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container, "card", card.UUID, "kubeletAccount", acct.ok)
		return decision{cards: []nvml.Card{card}, units: n}, nil
	}
	snap := p.snapshot(v, acct)
	d, err := allocate.MatchUnits(snap, u)
	if errors.Is(err, allocate.ErrNotScheduled) || errors.Is(err, allocate.ErrPodRequest) {
		p.state.units.reject(d.Entry.UID)
	}
	if err != nil {
		return decision{}, err
	}
	e := d.Entry
	// The pod the kubelet is admitting is no guess.
	unsure := acct.ok && !acct.admitting(e.UID) && p.state.units.isContradicted(e.UID) && otherCandidate(snap, e, n)
	p.state.units.guess(holding{Namespace: e.Namespace, Pod: e.Pod, UID: e.UID, Container: e.Container, Cards: []string{d.CardUUID}, IDs: append([]string(nil), u.IDs...), Unsure: unsure})
	p.log.Info("Allocated", "pod", klog.KRef(e.Namespace, e.Pod), "container", e.Container, "units", n, "card", card.UUID, "cardIndex", card.Index, "assignedCard", e.Assigned.CardUUID, "corrected", d.Corrected, "repeat", d.Repeat, "recorded", !unsure)
	out := decision{cards: []nvml.Card{card}, units: n}
	if !d.Repeat {
		out.pod, out.container, out.ids = v.byUID[e.UID], e.Container, u.IDs
	}
	if !unsure {
		out.write = podRef{Namespace: e.Namespace, Name: e.Pod, UID: e.UID}
	}
	return out, nil
}

// otherCandidate reports whether a pending container of another pod asks
// for the same units as e.
func otherCandidate(s allocate.Snapshot, e allocate.Entry, units int64) bool {
	return slices.ContainsFunc(s.Pending, func(o allocate.Entry) bool { return o.UID != e.UID && o.Units == units })
}

// snapshot builds the matching's view of the node. account: the ledger
// holds the kubelet's own account of what it has allocated.
func (p *Plugin) snapshot(v podView, acct account) allocate.Snapshot {
	l := p.state.units
	return allocate.Build(v.pods, allocate.State{Allocated: l.has, Rejected: l.isRejected, Reopened: l.isReopened, KubeletAccount: acct.ok, Admitting: acct.admitting, Arrival: p.cluster.Arrival, Keys: p.keys(), Names: p.cfg.Names})
}

// preferred steers the kubelet to units of the card assigned to the
// container it is about to allocate (allocate.Preferred).
func (k units) preferred(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	for _, cr := range req.GetContainerRequests() {
		if err := allocate.CheckIDs(cr.GetAvailableDeviceIDs()); err != nil {
			return nil, toStatus(err)
		}
		if err := allocate.CheckIDs(cr.GetMustIncludeDeviceIDs()); err != nil {
			return nil, toStatus(err)
		}
		if cr.GetAllocationSize() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "allocation size %d is negative", cr.GetAllocationSize())
		}
	}
	sizes := make([]int, 0, len(req.GetContainerRequests()))
	for _, cr := range req.GetContainerRequests() {
		if len(cr.GetMustIncludeDeviceIDs()) == 0 {
			sizes = append(sizes, int(cr.GetAllocationSize()))
		}
	}
	snap, held, err := k.preferredSnapshot(ctx, sizes)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		// Units the kubelet's own account shows held by a live pod are not
		// offered, should the kubelet have forgotten their reservation
		// (Allocate refuses them: account.heldByOther).
		avail := cr.GetAvailableDeviceIDs()
		if len(held) > 0 {
			avail = slices.DeleteFunc(slices.Clone(avail), func(id string) bool { return held[id] })
		}
		ids := allocate.Preferred(snap, avail, cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// preferredSnapshot is the snapshot GetPreferredAllocation decides on, and the units the
// kubelet's account shows held. Like Allocate it waits (waitFor) for a container of each requested
// size and, with the account, for the pod the kubelet admits: a preference for the queue's head
// would give that pod another card, whose room the extender planned for another pod.
func (k units) preferredSnapshot(ctx context.Context, sizes []int) (snap allocate.Snapshot, held map[string]bool, err error) {
	p := k.p
	p.waitFor(ctx, func() bool {
		accts, done := k.accounts(ctx), false
		err = p.locked(accts, func(v podView, _ []types.UID) {
			snap, held = p.snapshot(v, accts.units), nil
			if accts.units.ok {
				held = accts.units.heldUnits(v)
			}
			done = allocate.Explains(snap, sizes) && (!accts.units.ok || slices.ContainsFunc(snap.Pending, func(e allocate.Entry) bool { return accts.units.admitting(e.UID) }))
		})
		return err != nil || done
	})
	return snap, held, err
}

// preStart is called by the kubelet before it starts each container (PreStartRequired). With the
// kubelet's account the plugin learns here which container holds the IDs and makes its record name
// their card, reverting guesses the account contradicts, before answering: a running container's
// record names its card (a failed write fails the call; the kubelet retries the start). A record
// that names the card already is not waited for: its phase is left to the record writer.
func (k units) preStart(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p := k.p
	u, err := allocate.ParseUnits(req.GetDevicesIds())
	if err != nil {
		return nil, toStatus(err)
	}
	p.rec.swapDeferred(ctx)
	accts := k.accounts(podresources.WithStarting(ctx, u.IDs))
	if !accts.units.ok {
		// The plugin's decision is all there is: its record, which Allocate
		// left to the record writer, is written before the container starts.
		p.rec.writeDecided(ctx, u.IDs)
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	var refs []podRef
	var h holding
	var held, named bool
	if err := p.locked(accts, func(v podView, reopened []types.UID) {
		refs = v.refs(reopened)
		h, held = p.state.units.byDeviceIDs(u.IDs)
		named = held && p.rec.names(v.byUID[h.UID], h)
	}); err != nil {
		return nil, toStatus(err)
	}
	p.rec.writeRecords(ctx, refs)
	if !held || h.Guess {
		// Not (yet) in the kubelet's account: nothing certain to record
		// beyond the plugin's own decision.
		p.log.V(2).Info("PreStartContainer for units the kubelet's account does not show", "devices", len(u.IDs))
		p.rec.writeDecided(ctx, u.IDs)
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	p.state.units.start(h.UID, h.Container)
	ref := podRef{Namespace: h.Namespace, Name: h.Pod, UID: h.UID}
	if named && !h.Guess {
		p.rec.queueRecords(ctx, []podRef{ref})
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	if err := p.rec.writeRecord(ctx, ref, kubeletCall); err != nil {
		return nil, status.Errorf(codes.Unavailable, "recording that pod %s/%s container %s holds units of card %s: %v; the kubelet retries the container start", h.Namespace, h.Pod, h.Container, h.card(), err)
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// writeDecided writes the record of the pod the plugin's ledger gave ids
// (its decision at Allocate, which the record writer may not have written
// yet); errors are logged: the reconciler retries.
func (p recorder) writeDecided(ctx context.Context, ids []string) {
	if h, ok := p.state.units.byDeviceIDs(ids); ok {
		p.writeRecords(ctx, []podRef{{Namespace: h.Namespace, Name: h.Pod, UID: h.UID}})
	}
}

// errNotAdvertised: the IDs are of one known card but name units this
// plugin never advertised in ListAndWatch. The kubelet only hands out
// advertised units, once each, so such a call is a peer's mistake
// (InvalidArgument), not a container to match.
var errNotAdvertised = errors.New("device IDs name units this plugin does not advertise")

// checkAdvertised reports whether every one of u's IDs, all of card (as
// allocate.ParseUnits found), is a unit ListAndWatch advertises for it
// (inventory.Store.Devices: api.UnitID(card, n) for n below the card's
// units), each named once.
func checkAdvertised(card nvml.Card, unit api.MemoryUnit, u allocate.Units) error {
	units := unit.UnitsFromMiB(card.MemoryMiB)
	seen := make(map[int64]bool, len(u.IDs))
	for i, id := range u.IDs {
		n := u.Numbers[i]
		switch {
		case id != api.UnitID(card.UUID, n):
			return fmt.Errorf("%w: %q is not spelled as advertised (%q)", errNotAdvertised, id, api.UnitID(card.UUID, n))
		case n >= units:
			return fmt.Errorf("%w: unit %d of card %s, which has %d units (0 to %d)", errNotAdvertised, n, card.UUID, units, units-1)
		case seen[n]:
			return fmt.Errorf("%w: %q is named twice", errNotAdvertised, id)
		}
		seen[n] = true
	}
	return nil
}

// errUnknownCard: the IDs name a card this plugin does not advertise.
var errUnknownCard = errors.New("device IDs name a card this plugin does not advertise")

// toStatus is the one place errors become gRPC status codes. The message is
// what the kubelet puts in the pod's UnexpectedAdmissionError event.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, allocate.ErrNotScheduled), errors.Is(err, allocate.ErrPodRequest), errors.Is(err, allocate.ErrCardInUse), errors.Is(err, allocate.ErrCardsNotScheduled), errors.Is(err, errUnitsHeld):
		code = codes.FailedPrecondition
	case errors.Is(err, allocate.ErrSpansCards), errors.Is(err, errUnknownCard), errors.Is(err, errNotAdvertised), errors.Is(err, allocate.ErrBadDeviceID), errors.Is(err, allocate.ErrNoDeviceIDs), errors.Is(err, allocate.ErrCardID):
		code = codes.InvalidArgument
	case errors.Is(err, allocate.ErrNoPending), errors.Is(err, allocate.ErrNoPendingCards):
		code = codes.NotFound
	case errors.Is(err, errPodCache):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}
