package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/periodic"
)

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
	accts := p.acct.readAccounts(ctx, true, true)
	var v podView
	err := p.locked(accts, func(lv podView, _ []types.UID) {
		v = lv
		live := make(map[types.UID]bool, len(v.pods))
		for uid := range v.byUID {
			live[uid] = true
		}
		p.state.units.retain(live)
		p.records.retainWrites(live)
		p.state.whole.retain(live)
		p.recon.reopenUnheld(v, accts.units.ok, accts.whole.ok)
	})
	if err != nil {
		return err
	}
	// Cards released or taken since the last pass change the devices'
	// health (ListAndWatch of both resources).
	p.state.held.notify()
	var errs []error
	held := map[types.UID]map[string]holding{}
	for _, h := range accts.units.holdings {
		if held[h.UID] == nil {
			held[h.UID] = map[string]holding{}
		}
		held[h.UID][h.Container] = h
	}
	for uid, hs := range held {
		pod := v.byUID[uid]
		if pod == nil {
			continue // deleted since the account was read: nothing to repair
		}
		if _, aerr := p.rec.record(pod); aerr != nil {
			if err := p.recon.repair(ctx, pod, hs, aerr); err != nil {
				errs = append(errs, fmt.Errorf("repairing the record of pod %s/%s: %w", pod.Namespace, pod.Name, err))
			}
		}
	}
	// Reopened pods first: a record that stops claiming units is written
	// before the one that claims them, so no card's Allocated records ever
	// hold more than the card.
	pods := append([]*corev1.Pod(nil), v.pods...)
	sort.SliceStable(pods, func(i, j int) bool {
		return p.recon.reopened(pods[i].UID) && !p.recon.reopened(pods[j].UID)
	})
	keys := p.keys()
	for _, pod := range pods {
		a, err := p.rec.record(pod)
		if err != nil {
			continue
		}
		// The cached record may predate the plugin's own last write (a guess
		// recorded Allocated): a reopened pod is written whatever the cache
		// shows (writeRecord reads the record from the API server).
		if changed, _ := p.rec.applyLedger(&a, pod.UID); !changed && !p.recon.reopened(pod.UID) {
			if keys.Enabled() && !keys.SignedByCurrent(a) {
				if err := p.recon.resign(ctx, pod); err != nil {
					errs = append(errs, fmt.Errorf("pod %s/%s: signing its record with the current key: %w", pod.Namespace, pod.Name, err))
				}
			}
			continue // the cached record already matches
		}
		if !p.recon.reopened(pod.UID) && p.cluster.RecordAhead(pod) && p.rec.wroteLedger(pod.UID) {
			continue // the cache has yet to show the plugin's own write, which matches the ledger
		}
		if err := p.rec.writeRecord(ctx, podRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, reconciliation); err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

// reopened reports whether either ledger reopened the pod.
func (p reconciler) reopened(uid types.UID) bool {
	return p.state.units.isReopened(uid) || p.state.whole.isReopened(uid)
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
func (p reconciler) reopenUnheld(v podView, units, whole bool) {
	if !units && !whole {
		return
	}
	for _, pod := range v.pods {
		if !api.MayStartContainers(pod) || api.Admitted(pod) {
			continue
		}
		a, err := p.rec.record(pod)
		if err != nil || a.Phase != api.PhaseAllocated {
			continue
		}
		if units && slices.ContainsFunc(a.Containers, func(c api.ContainerAssignment) bool { return !p.state.units.has(pod.UID, c.Name) }) {
			p.log.Info("Reopening a pod recorded Allocated that the kubelet's account shows holding no units", "pod", klog.KObj(pod))
			p.state.units.reopen(pod.UID)
		}
		if whole && slices.ContainsFunc(a.WholeCards, func(w api.WholeCardAssignment) bool { _, ok := p.state.whole.get(pod.UID, w.Name); return !ok }) {
			p.log.Info("Reopening a pod recorded Allocated that the kubelet's account shows holding no whole cards", "pod", klog.KObj(pod))
			p.state.whole.reopen(pod.UID)
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
func (p reconciler) repair(ctx context.Context, pod *corev1.Pod, held map[string]holding, why error) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	defer p.records.forgetWrite(pod.UID)
	var rebuilt bool
	var refused error
	err := p.cluster.RepairAssignment(ctx, pod.Namespace, pod.Name, pod.UID, func(fresh *corev1.Pod) (api.Assignment, bool) {
		rebuilt, refused = false, nil
		if !api.HoldsUnits(fresh) {
			return api.Assignment{}, false
		}
		if _, err := p.rec.record(fresh); err == nil {
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
func (p reconciler) fromAccount(pod *corev1.Pod, held map[string]holding) (api.Assignment, error) {
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
		card, ok := p.store.Card(h.card())
		if !ok {
			return api.Assignment{}, fmt.Errorf("%w: %s", errUnknownCard, h.card())
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
func (p reconciler) resign(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	defer p.records.forgetWrite(pod.UID)
	return p.cluster.UpdateAssignment(ctx, pod.Namespace, pod.Name, pod.UID, p.rec.signed(func(a *api.Assignment) bool {
		return !p.keys().SignedByCurrent(*a)
	}))
}

// RunReconciler reconciles after every Allocate and every ReconcileInterval
// until ctx is done.
func (p *Plugin) RunReconciler(ctx context.Context) {
	p.recon.runReconciler(ctx)
}

// reconcileSpacing is the least time between two reconciliations.
const reconcileSpacing = time.Second

func (p reconciler) runReconciler(ctx context.Context) {
	periodic.Run(ctx, p.cfg.Clock, p.cfg.ReconcileInterval, p.reconcile, func() {
		if err := p.Reconcile(ctx); err != nil {
			p.log.Error(err, "Reconciling assignment records")
		}
		// Every Allocate of a burst asks for a run: at most one a
		// reconcileSpacing, so that the reads of the kubelet's account
		// leave its PodResources budget to the admissions.
		select {
		case <-ctx.Done():
		case <-p.cfg.Clock.After(reconcileSpacing):
		}
	})
}
