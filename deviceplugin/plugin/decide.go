package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// errPodCache: the informer's cache could not be listed.
var errPodCache = errors.New("pod cache unavailable")

// podView is one listing of the pod cache, indexed by UID: one List per
// decision, however many questions it answers.
type podView struct {
	pods  []*corev1.Pod
	byUID map[types.UID]*corev1.Pod
}

func (p *Plugin) view() (podView, error) {
	pods, err := p.cluster.Pods()
	if err != nil {
		return podView{}, fmt.Errorf("%w: %w", errPodCache, err)
	}
	v := podView{pods: pods, byUID: make(map[types.UID]*corev1.Pod, len(pods))}
	for _, pod := range pods {
		v.byUID[pod.UID] = pod
	}
	return v, nil
}

// snapshot builds the matching's view of the node. account: the ledger
// holds the kubelet's own account of what it has allocated.
func (p *Plugin) snapshot(v podView, account bool) allocate.Snapshot {
	return allocate.Build(v.pods, allocate.State{Allocated: p.ledger.has, Rejected: p.ledger.isRejected, Reopened: p.ledger.isReopened, KubeletAccount: account, Arrival: p.cluster.Arrival, Keys: p.keys(), Names: p.cfg.Names})
}

// holds reports whether the kubelet may still call Allocate for the pod with
// this UID (api.MayStartContainers over the pod cache). Units of a pod that
// is gone, finished or being deleted are not re-allocated to it; the kubelet
// may hand the same IDs to the next pod.
func (p *Plugin) holds(uid types.UID) bool {
	v, err := p.view()
	if err != nil {
		return false
	}
	return api.MayStartContainers(v.byUID[uid])
}

// decision is one container request's outcome.
type decision struct {
	card  nvml.Card
	units int64
	// write names the pod whose record must be written after the lock
	// (empty UID: nothing to write); reopened, pods the kubelet's account
	// reopened on the way.
	write    podRef
	reopened []podRef
}

// podRef names a pod for a record write.
type podRef struct {
	Namespace, Name string
	UID             types.UID
}

// allocatePoll is how often Allocate looks again for a pod the kubelet saw
// before the plugin's informer.
const allocatePoll = 100 * time.Millisecond

// decideWaiting decides for one container request, waiting up to
// Config.AllocateWait for a pod the kubelet knows before the informer does.
// allocMu is taken for each attempt and released while waiting.
func (p *Plugin) decideWaiting(ctx context.Context, ids []string, acct account, account bool) (decision, error) {
	var d decision
	var err error
	p.waitFor(ctx, func() bool {
		d, err = p.decideLocked(ids, acct, account)
		return !errors.Is(err, allocate.ErrNoPending)
	})
	return d, err
}

// waitFor calls look, then again every allocatePoll (on the injected
// clock), until it reports done, Config.AllocateWait has passed since the
// first call, or ctx is done: the wait of Allocate and of both
// GetPreferredAllocations for a pod the kubelet saw before the plugin's
// informer. look takes allocMu itself; it is not held while waiting.
func (p *Plugin) waitFor(ctx context.Context, look func() (done bool)) {
	deadline := p.cfg.Clock.Now().Add(p.cfg.AllocateWait)
	for !look() && p.cfg.AllocateWait > 0 && p.cfg.Clock.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Clock.After(allocatePoll):
		}
	}
}

// waitForView is waitFor for a look at one listing of the pod cache, taken
// under allocMu; a cache that cannot be listed ends the wait with its error.
func (p *Plugin) waitForView(ctx context.Context, look func(v podView) (done bool)) error {
	var err error
	p.waitFor(ctx, func() bool {
		p.allocMu.Lock()
		defer p.allocMu.Unlock()
		var v podView
		if v, err = p.view(); err != nil {
			return true
		}
		return look(v)
	})
	return err
}

// decideLocked merges the kubelet's account and decides, under allocMu.
// The decision's reopened are the pods the merge reopened: their records
// are written after the lock too.
func (p *Plugin) decideLocked(ids []string, acct account, account bool) (decision, error) {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	v, err := p.view()
	if err != nil {
		return decision{}, err
	}
	var reopened []podRef
	if account {
		reopened = v.refs(p.merge(acct))
		if h, exact, held := acct.heldByOther(v, ids); held && p.refuseHeld(v, h, exact) {
			return decision{reopened: reopened}, heldErr(h, ids)
		}
	}
	d, err := p.decide(v, ids, account)
	d.reopened = reopened
	return d, err
}

// refs names the pods with these UIDs that are in the view.
func (v podView) refs(uids []types.UID) []podRef {
	var out []podRef
	for _, uid := range uids {
		if pod, ok := v.byUID[uid]; ok {
			out = append(out, podRef{Namespace: pod.Namespace, Name: pod.Name, UID: uid})
		}
	}
	return out
}

// decide is one Allocate decision (callers hold allocMu; no I/O): which
// container the IDs are for, recorded in the ledger, and whether its record
// is to be written.
//
// The record shows a guess unless the guess is one the plugin already knows
// to be unreliable: with the kubelet's account, a pod the account already
// contradicted once (the kubelet admits in another order than the queue)
// is not shown holding a second allocation while another pending container
// of that size could as well be the one; its record waits for the
// kubelet's account (PreStartContainer, reconciliation).
func (p *Plugin) decide(v podView, ids []string, account bool) (decision, error) {
	cardUUID, err := allocate.CardOf(ids)
	if err != nil {
		return decision{}, err
	}
	card, ok := p.store.Card(cardUUID)
	if !ok {
		return decision{}, fmt.Errorf("%w: %s", errUnknownCard, cardUUID)
	}
	if err := checkAdvertised(card, p.store.Unit(), ids); err != nil {
		return decision{}, err
	}
	units := int64(len(ids))
	// With the kubelet's account, a container holding exactly these units is
	// a retry (after a plugin restart too); without it, the plugin's memory.
	if h, ok := p.ledger.byDeviceIDs(ids); ok && api.MayStartContainers(v.byUID[h.UID]) {
		p.log.Info("Allocate repeated for a container that holds these units", "pod", klog.KRef(h.Namespace, h.Pod), "container", h.Container, "card", card.UUID, "kubeletAccount", account)
		return decision{card: card, units: units}, nil
	}
	snap := p.snapshot(v, account)
	d, err := allocate.Match(snap, ids)
	if errors.Is(err, allocate.ErrNotScheduled) || errors.Is(err, allocate.ErrPodRequest) {
		p.ledger.reject(d.Entry.UID)
	}
	if err != nil {
		return decision{}, err
	}
	e := d.Entry
	unsure := account && p.ledger.isContradicted(e.UID) && otherCandidate(snap, e, units)
	p.ledger.guess(holding{Namespace: e.Namespace, Pod: e.Pod, UID: e.UID, Container: e.Container, Card: d.CardUUID, IDs: append([]string(nil), ids...), Unsure: unsure})
	p.log.Info("Allocated", "pod", klog.KRef(e.Namespace, e.Pod), "container", e.Container, "units", units, "card", card.UUID, "cardIndex", card.Index, "assignedCard", e.Assigned.CardUUID, "corrected", d.Corrected, "repeat", d.Repeat, "recorded", !unsure)
	out := decision{card: card, units: units}
	if !unsure {
		out.write = podRef{Namespace: e.Namespace, Name: e.Pod, UID: e.UID}
	}
	return out, nil
}

// otherCandidate reports whether a pending container of another pod asks
// for the same units as e.
func otherCandidate(s allocate.Snapshot, e allocate.Entry, units int64) bool {
	for _, o := range s.Pending {
		if o.UID != e.UID && o.Units == units {
			return true
		}
	}
	return false
}
