package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// move is a container's record going from one card to another.
type move struct {
	pod      types.UID
	units    int64
	from, to string
}

// writeRecord makes the pod's assignment record match the ledger (read at
// write time, so a retried write never applies an older view): each
// container the ledger shows holding units gets the card it holds, the
// phase becomes Allocated once every container holds its units, and a
// reopened pod's Allocated record goes back to Assigned. Then, for each
// container whose card changed, swap keeps both cards' records within
// their capacity (at: the kubelet's moment, Allocate or PreStartContainer;
// otherwise reconciliation, see swap). Called without allocMu.
func (p *Plugin) writeRecord(ctx context.Context, ref podRef, at moment) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	var moves []move
	err := p.cluster.UpdateAssignment(ctx, ref.Namespace, ref.Name, ref.UID, p.signed(func(a *api.Assignment) bool {
		var changed bool
		changed, moves = p.applyLedger(a, ref.UID)
		return changed
	}))
	if err != nil {
		return err
	}
	for _, m := range moves {
		if !p.swap(ctx, m, at == kubeletCall) {
			p.ledger.deferMove(m)
		}
	}
	return nil
}

// moment says who writes a record: a call of the kubelet, or reconciliation.
type moment bool

const (
	kubeletCall    moment = true
	reconciliation moment = false
)

// swapDeferred retries the swaps reconciliation left for the kubelet's next
// call (see swap). Called without allocMu, at the start of Allocate and
// PreStartContainer.
func (p *Plugin) swapDeferred(ctx context.Context) {
	for _, m := range p.ledger.takeDeferred() {
		p.swap(ctx, m, true)
	}
}

// applyLedger makes a match the ledger, and returns the card moves made.
func (p *Plugin) applyLedger(a *api.Assignment, uid types.UID) (bool, []move) {
	held := p.ledger.forPod(uid)
	reopened := p.reopened(uid)
	changed, all := false, true
	var moves []move
	for i := range a.Containers {
		c := &a.Containers[i]
		h, ok := held[c.Name]
		if !ok || h.Unsure {
			all = false
			continue
		}
		if c.CardUUID != h.Card {
			card, ok := p.store.Card(h.Card)
			if !ok {
				continue
			}
			moves = append(moves, move{pod: uid, units: c.Units, from: c.CardUUID, to: card.UUID})
			c.CardUUID, c.CardIndex = card.UUID, card.Index
			changed = true
		}
	}
	wholeChanged, wholeAll := p.applyWhole(a, uid)
	changed = changed || wholeChanged
	all = all && wholeAll
	if all && a.Phase != api.PhaseAllocated {
		a.Phase = api.PhaseAllocated
		changed = true
	}
	if !all && reopened && a.Phase == api.PhaseAllocated {
		a.Phase = api.PhaseAssigned
		changed = true
	}
	return changed, moves
}

// swap keeps per-card records within capacity when a container's record
// moved from card m.from to card m.to: the kubelet gave it units of m.to
// that the extender had planned for some other container, so one pending
// container of the same size planned on m.to takes the room it left on
// m.from. Each card's records then sum to what they summed to before.
//
// Partners are containers that hold nothing, of pods that await admission
// and whose record is Assigned: first of pods the plugin has never named
// (their record is still the extender's plan), then of pods whose guess the
// kubelet contradicted (named: only when anyPartner); oldest first. No partner: the record of m.to shows more
// than planned until the kubelet allocates the others (the kubelet itself
// never over-allocates).
//
// Reconciliation, the catch-up path, swaps only with never-named partners;
// a move it cannot pair that way is deferred to the kubelet's next call
// (Allocate or PreStartContainer), which may pair it with a named one. A
// reopened pod's record thus keeps its card until the kubelet acts again.
// It reports whether it is done with m: false leaves it for later (see
// writeRecord).
func (p *Plugin) swap(ctx context.Context, m move, anyPartner bool) bool {
	from, ok := p.store.Card(m.from)
	if !ok || m.from == m.to {
		return true
	}
	v, err := p.view()
	if err != nil {
		return false
	}
	type cand struct {
		pod       *corev1.Pod
		container string
		named     bool
	}
	var cands []cand
	for _, pod := range v.pods {
		if pod.UID == m.pod || !api.MayStartContainers(pod) || api.Admitted(pod) {
			continue
		}
		a, err := p.record(pod)
		if err != nil || a.Phase != api.PhaseAssigned {
			continue
		}
		for _, c := range a.Containers {
			if c.Units == m.units && c.CardUUID == m.to {
				named := p.ledger.isNamed(pod.UID)
				if named && !anyPartner {
					continue
				}
				cands = append(cands, cand{pod, c.Name, named})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].named != cands[j].named {
			return !cands[i].named
		}
		return cands[i].pod.CreationTimestamp.Before(&cands[j].pod.CreationTimestamp)
	})
	for _, c := range cands {
		if !p.ledger.claim(c.pod.UID, c.container) {
			continue
		}
		done := false
		err := p.cluster.UpdateAssignment(ctx, c.pod.Namespace, c.pod.Name, c.pod.UID, p.signed(func(a *api.Assignment) bool {
			done = false
			if a.Phase != api.PhaseAssigned || p.ledger.has(c.pod.UID, c.container) {
				return false
			}
			for i := range a.Containers {
				if a.Containers[i].Name == c.container && a.Containers[i].CardUUID == m.to && a.Containers[i].Units == m.units {
					a.Containers[i].CardUUID, a.Containers[i].CardIndex = from.UUID, from.Index
					done = true
				}
			}
			return done
		}))
		p.ledger.unclaim(c.pod.UID, c.container)
		if err != nil {
			p.log.Error(err, "Moving a pending container to the card another container left; retried at the kubelet's next call", "pod", klog.KObj(c.pod), "container", c.container)
			return false
		}
		if done {
			p.log.Info("Swapped a pending container's card", "pod", klog.KObj(c.pod), "container", c.container, "from", m.to, "to", m.from)
			return true
		}
	}
	// No partner: at the kubelet's moment that is final; reconciliation
	// leaves the move for the kubelet's next call.
	return anyPartner
}

// Reconcile makes the pods' records match what the kubelet allocated: it
// reads the kubelet's PodResources (when configured) into the ledger, which
// corrects the plugin's guesses, then patches every record that differs.
// A record the plugin cannot trust (none, undecodable, not the pod's, not
// signed by the record key) on a pod the kubelet holds units for is
// rewritten from the kubelet's account (repair); a trusted record signed by
// the previous key of a rotation is signed again with the current one
// (resign). Pods the kubelet holds nothing for keep their record: they get
// no card at Allocate anyway.
func (p *Plugin) Reconcile(ctx context.Context) error {
	acct, account := p.readAccount(ctx)
	wacct, waccount := p.readWholeAccount(ctx)
	p.allocMu.Lock()
	v, err := p.view()
	if err != nil {
		p.allocMu.Unlock()
		return err
	}
	if account {
		p.merge(acct)
	}
	if waccount {
		p.mergeWhole(wacct)
	}
	live := make(map[types.UID]bool, len(v.pods))
	for uid := range v.byUID {
		live[uid] = true
	}
	p.ledger.retain(live)
	p.whole.retain(live)
	p.reopenUnheld(v, account, waccount)
	p.allocMu.Unlock()
	// Cards released or taken since the last pass change the devices'
	// health (ListAndWatch of both resources).
	p.held.notify()
	var errs []error
	held := map[types.UID]map[string]holding{}
	for _, h := range acct.holdings {
		if held[h.UID] == nil {
			held[h.UID] = map[string]holding{}
		}
		held[h.UID][h.Container] = h
	}
	for uid, hs := range held {
		pod := v.byUID[uid]
		if _, aerr := p.record(pod); aerr != nil {
			if err := p.repair(ctx, pod, hs, aerr); err != nil {
				errs = append(errs, fmt.Errorf("repairing the record of pod %s/%s: %w", pod.Namespace, pod.Name, err))
			}
		}
	}
	// Reopened pods first: a record that stops claiming units is written
	// before the one that claims them, so no card's Allocated records ever
	// hold more than the card.
	pods := append([]*corev1.Pod(nil), v.pods...)
	sort.SliceStable(pods, func(i, j int) bool {
		return p.reopened(pods[i].UID) && !p.reopened(pods[j].UID)
	})
	keys := p.keys()
	for _, pod := range pods {
		a, err := p.record(pod)
		if err != nil {
			continue
		}
		// The cached record may predate the plugin's own last write (a guess
		// recorded Allocated): a reopened pod is written whatever the cache
		// shows (writeRecord reads the record from the API server).
		if changed, _ := p.applyLedger(&a, pod.UID); !changed && !p.reopened(pod.UID) {
			if keys.Enabled() && !keys.SignedByCurrent(a) {
				if err := p.resign(ctx, pod); err != nil {
					errs = append(errs, fmt.Errorf("pod %s/%s: signing its record with the current key: %w", pod.Namespace, pod.Name, err))
				}
			}
			continue // the cached record already matches
		}
		if err := p.writeRecord(ctx, podRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, reconciliation); err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

// reopened reports whether either ledger reopened the pod.
func (p *Plugin) reopened(uid types.UID) bool {
	return p.ledger.isReopened(uid) || p.whole.isReopened(uid)
}

// reopenUnheld reopens each pod whose record is Allocated while the pod
// awaits admission and the kubelet's account, just merged into the ledger,
// shows a container of it holding nothing that no guess of this process
// holds either (callers hold allocMu; units and whole: which accounts were
// read). Such a record is a guess an earlier process of the plugin wrote at
// Allocate and could not correct before it stopped — the ledger is in
// memory — while the kubelet gave those units to another pod, or to none:
// left Allocated, it would count the same memory twice on that card until
// the pod's own admission. Reopened, its record drops back to Assigned
// (applyLedger), written before the records that claim units (Reconcile).
// A pod shown admitted keeps its record: only its own account can change it.
func (p *Plugin) reopenUnheld(v podView, units, whole bool) {
	if !units && !whole {
		return
	}
	for _, pod := range v.pods {
		if !api.MayStartContainers(pod) || api.Admitted(pod) {
			continue
		}
		a, err := p.record(pod)
		if err != nil || a.Phase != api.PhaseAllocated {
			continue
		}
		if units && slices.ContainsFunc(a.Containers, func(c api.ContainerAssignment) bool { return !p.ledger.has(pod.UID, c.Name) }) {
			p.log.Info("Reopening a pod recorded Allocated that the kubelet's account shows holding no units", "pod", klog.KObj(pod))
			p.ledger.reopen(pod.UID)
		}
		if whole && slices.ContainsFunc(a.WholeCards, func(w api.WholeCardAssignment) bool { _, ok := p.whole.get(pod.UID, w.Name); return !ok }) {
			p.log.Info("Reopening a pod recorded Allocated that the kubelet's account shows holding no whole cards", "pod", klog.KObj(pod))
			p.whole.reopen(pod.UID)
		}
	}
}

// repair rewrites the record of a pod the kubelet holds units for, which
// the plugin cannot trust (why), from the kubelet's account held (by
// container): each container that requests gpu-mem gets the card of the
// units the kubelet gave it, the phase is Allocated, and with a record key
// the record is signed. The pod as read from the API server is checked
// again: a record that is trusted by then, a pod that finished, or a
// container the account does not show holding exactly its request leaves
// the record alone (logged).
//
// With the admission policies installed, nobody but the extender can add a
// record, nor can anyone but it and the plugin change one, so there is
// nothing to repair; a repair that adds a record is refused by them.
func (p *Plugin) repair(ctx context.Context, pod *corev1.Pod, held map[string]holding, why error) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	var rebuilt bool
	var refused error
	err := p.cluster.RepairAssignment(ctx, pod.Namespace, pod.Name, pod.UID, func(fresh *corev1.Pod) (api.Assignment, bool) {
		rebuilt, refused = false, nil
		if !api.HoldsUnits(fresh) {
			return api.Assignment{}, false
		}
		if _, err := p.record(fresh); err == nil {
			return api.Assignment{}, false // trusted meanwhile
		}
		a, err := p.fromAccount(fresh, held)
		if err != nil {
			refused = err
			return api.Assignment{}, false
		}
		rebuilt = true
		return a, true
	})
	switch {
	case err != nil:
		return err
	case refused != nil:
		p.log.Error(refused, "A pod holds gpu-mem units without a trusted gpushare record, and the kubelet's account cannot rebuild it", "pod", klog.KObj(pod), "record", why.Error())
	case rebuilt:
		p.log.Info("Rewrote an untrusted record from the kubelet's account", "pod", klog.KObj(pod), "was", why.Error())
	}
	return nil
}

// fromAccount is the record of pod as the kubelet's account shows it (see
// repair), signed with the key in force.
func (p *Plugin) fromAccount(pod *corev1.Pod, held map[string]holding) (api.Assignment, error) {
	req, err := p.cfg.Names.RequestFromPod(pod)
	if err != nil {
		return api.Assignment{}, err
	}
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: pod.UID, Node: pod.Spec.NodeName, Unit: p.store.Unit(), Phase: api.PhaseAllocated}
	for _, c := range req.Containers {
		h, ok := held[c.Name]
		if !ok {
			return api.Assignment{}, fmt.Errorf("container %q requests %d units but holds none in the kubelet's account", c.Name, c.Units)
		}
		if int64(len(h.IDs)) != c.Units {
			return api.Assignment{}, fmt.Errorf("container %q requests %d units, the kubelet's account shows %d", c.Name, c.Units, len(h.IDs))
		}
		card, ok := p.store.Card(h.Card)
		if !ok {
			return api.Assignment{}, fmt.Errorf("%w: %s", errUnknownCard, h.Card)
		}
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, CardUUID: card.UUID, CardIndex: card.Index, Units: c.Units})
	}
	if err := a.Validate(); err != nil {
		return api.Assignment{}, err
	}
	return p.keys().Sign(a)
}

// resign signs a trusted record again with the current key (it was signed
// by the previous one), so that a rotation can drop the previous key once
// every plugin has reconciled.
func (p *Plugin) resign(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	return p.cluster.UpdateAssignment(ctx, pod.Namespace, pod.Name, pod.UID, p.signed(func(a *api.Assignment) bool {
		return !p.keys().SignedByCurrent(*a)
	}))
}

// RunReconciler reconciles after every Allocate and every ReconcileInterval
// until ctx is done.
func (p *Plugin) RunReconciler(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-p.reconcile:
		}
		if err := p.Reconcile(ctx); err != nil {
			p.log.Error(err, "Reconciling assignment records")
		}
	}
}

// record is the pod's assignment as the plugin trusts it: decoded, and with
// record keys, signed by the extender (api.RecordKeys.Verify).
func (p *Plugin) record(pod *corev1.Pod) (api.Assignment, error) {
	a, err := p.cfg.Names.AssignmentFromPod(pod)
	if err != nil {
		return a, err
	}
	return a, p.keys().Verify(a)
}

// signed wraps a record update: a record the keys do not verify is left
// alone (the plugin never signs what the extender did not write), and a
// changed record is signed again, since the signature covers the phase and
// the cards the plugin may change.
func (p *Plugin) signed(mutate func(*api.Assignment) bool) func(*api.Assignment) bool {
	return func(a *api.Assignment) bool {
		keys := p.keys()
		if err := keys.Verify(*a); err != nil {
			p.log.Info("Leaving an untrusted record alone", "podUID", a.PodUID, "err", err)
			return false
		}
		if !mutate(a) {
			return false
		}
		s, err := keys.Sign(*a)
		if err != nil {
			p.log.Error(err, "Signing a record", "podUID", a.PodUID)
			return false
		}
		*a = s
		return true
	}
}
