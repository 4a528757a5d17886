package plugin

import (
	"context"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// wroteLedger reports whether the record the plugin last wrote on uid's pod
// matches the ledger.
func (p recorder) wroteLedger(uid types.UID) bool {
	last, ok, _ := p.records.lastWrite(uid)
	if !ok {
		return false
	}
	changed, _ := p.applyLedger(&last, uid)
	return !changed
}

// accountKept reports whether the plugin's last read of the kubelet's
// account of gpu-mem units (PodResources Get) succeeded.
func (p recorder) accountKept() bool { return p.unitsAccount.Load() }

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
//
// A kubelet call whose record the plugin already wrote (the record writer's, then
// PreStartContainer's) asks nothing of the API server: only the plugin writes a record after
// the bind, and writes of one pod are serialized. Reconciliation always reads.
func (p recorder) writeRecord(ctx context.Context, ref podRef, at moment) error {
	defer p.records.lockPod(ref.UID)()
	last, ok, epoch := p.records.lastWrite(ref.UID)
	if ok && at == kubeletCall {
		if changed, _ := p.applyLedger(&last, ref.UID); !changed {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	var moves []move
	var after api.Assignment
	var known bool
	mutate := p.signed(func(a *api.Assignment) bool {
		var changed bool
		changed, moves = p.applyLedger(a, ref.UID)
		after, known = *a, true
		return changed
	})
	err := p.cluster.UpdateAssignment(ctx, ref.Namespace, ref.Name, ref.UID, func(a *api.Assignment) bool {
		known = false // a record that fails verification on this try is not remembered
		return mutate(a)
	})
	p.records.setLastWrite(ref.UID, after, err == nil && known, epoch)
	if err != nil {
		return err
	}
	for _, m := range moves {
		if !p.swap(ctx, m, at == kubeletCall) {
			p.state.units.deferMove(m)
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
func (p recorder) swapDeferred(ctx context.Context) {
	for _, m := range p.state.units.takeDeferred() {
		p.swap(ctx, m, true)
	}
}

// applyLedger makes a match the ledger, and returns the card moves made.
func (p recorder) applyLedger(a *api.Assignment, uid types.UID) (bool, []move) {
	held := p.state.units.forPod(uid)
	reopened := p.recon.reopened(uid)
	changed, all := false, true
	var moves []move
	for i := range a.Containers {
		c := &a.Containers[i]
		h, ok := held[c.Name]
		if !ok || h.Unsure {
			all = false
			continue
		}
		if c.CardUUID != h.card() {
			card, ok := p.store.Card(h.card())
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
	// With the kubelet's account a record that names the cards its units
	// hold is left Assigned: decisions read the account, not the phase
	// (allocate.State.KubeletAccount), and the pod's status shows it holding
	// once admitted (api.RecordHolds). Saved: an API write per pod. A
	// corrected record, a whole-card one (allocate reads its phase) and any
	// record without the account become Allocated.
	if all && a.Phase != api.PhaseAllocated && (changed || len(a.WholeCards) > 0 || !p.accountKept()) {
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
func (p recorder) swap(ctx context.Context, m move, anyPartner bool) bool {
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
				named := p.state.units.isNamed(pod.UID)
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
		if !p.state.units.claim(c.pod.UID, c.container) {
			continue
		}
		done := false
		err := p.cluster.UpdateAssignment(ctx, c.pod.Namespace, c.pod.Name, c.pod.UID, p.signed(func(a *api.Assignment) bool {
			done = false
			if a.Phase != api.PhaseAssigned || p.state.units.has(c.pod.UID, c.container) {
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
		p.state.units.unclaim(c.pod.UID, c.container)
		p.records.forgetWrite(c.pod.UID)
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

// record is the pod's assignment as the plugin trusts it: decoded, and with
// record keys, signed by the extender or by this node's own key
// (api.RecordKeys.Verify).
func (p recorder) record(pod *corev1.Pod) (api.Assignment, error) {
	return p.cfg.Names.TrustedAssignment(pod, p.keys())
}

// names reports whether pod's trusted record names, for the container h
// holds units for, the card of those units.
func (p recorder) names(pod *corev1.Pod, h holding) bool {
	a, err := p.record(pod)
	return err == nil && slices.ContainsFunc(a.Containers, func(c api.ContainerAssignment) bool { return c.Name == h.Container && c.CardUUID == h.card() })
}

// signed wraps a record update: a record the keys do not verify is left
// alone (the plugin never signs what the extender did not write), and a
// changed record is signed again, with the plugin's node key, since the
// signature covers the phase and the cards the plugin may change.
func (p recorder) signed(mutate func(*api.Assignment) bool) func(*api.Assignment) bool {
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
