package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
)

// podResourcesTimeout bounds one read of the kubelet's PodResources API.
const podResourcesTimeout = 5 * time.Second

// account is one read of the kubelet's own account (PodResources) of one
// resource: which container of the pods in the cache holds which devices.
// gen is the resource ledger's generation when the read started: guesses
// made later are not in it. ok is false when there was no read (no
// PodResources for the resource, or the read failed): the plugin then
// decides on its own memory.
type account struct {
	res      *resource
	holdings []holding
	// known are the pods the kubelet knows (PodResources answers for them):
	// a pending pod it knows is the one it is admitting (see Holding).
	known map[types.UID]bool
	gen   uint64
	ok    bool
}

// admitting reports whether the kubelet knows the pod: for a pod that still
// awaits admission, that it is the pod the kubelet is admitting now.
func (a account) admitting(uid types.UID) bool { return a.ok && a.known[uid] }

// accounts are the reads of both resources' accounts (either may be absent).
type accounts struct{ units, whole account }

// readAccounts reads the kubelet's account of the gpu-mem units and/or of
// the whole cards. Called WITHOUT allocMu (gRPC calls).
func (p accountReader) readAccounts(ctx context.Context, units, whole bool) accounts {
	var a accounts
	if units {
		a.units = p.readAccount(ctx, p.units.res)
	}
	if whole {
		a.whole = p.readAccount(ctx, p.whole.res)
	}
	return a
}

// recheck has the kubelet's account of res forget what it remembers of the cache's pods not admitted
// yet (podresources.Kubelet.Recheck) and returns them.
func (p *Plugin) recheck(res *resource) []types.UID {
	c, ok := res.podres.(kubeletAccount)
	pods, err := p.cluster.Pods()
	if !ok || err != nil {
		return nil
	}
	return c.Recheck(pods)
}

// of is the account of resource r (an empty one if none was read).
func (a accounts) of(r *resource) account {
	return map[*resource]account{a.units.res: a.units, a.whole.res: a.whole}[r]
}

// holdsNothing reports whether the kubelet knows the pod and gives it none of the resource.
func (a account) holdsNothing(uid types.UID) bool {
	return a.admitting(uid) && !slices.ContainsFunc(a.holdings, func(h holding) bool { return h.UID == uid })
}

// readAccount reads the kubelet's account of one resource, pod by pod
// (PodResources Get, never List: see podresources.Kubelet). Called WITHOUT
// allocMu (gRPC calls).
//
// The kubelet admits pods one at a time and records a container's devices as
// soon as its Allocate returns, so a read that starts when the kubelet asks
// about the next container shows every container it has allocated so far:
// those are not pending, whatever the plugin guessed (a guess the account
// contradicts is dropped and its pod is reopened), and the only unknown left
// is which of the still-pending containers the call is for.
func (p accountReader) readAccount(ctx context.Context, r *resource) (acct account) {
	if r.podres == nil {
		return account{}
	}
	if r == p.units.res {
		defer func() { p.unitsAccount.Store(acct.ok) }()
	}
	acct = account{res: r, gen: r.ledger.generation(), ok: true}
	pods, err := p.cluster.Pods()
	if err != nil {
		return account{}
	}
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	hs, err := r.podres.Get(ctx, pods)
	if errors.Is(err, podresources.ErrGetDisabled) {
		p.getDisabled.Do(func() { p.log.Error(err, "Deciding on the plugin's own memory") })
		return account{}
	}
	if err != nil {
		p.log.V(2).Info("PodResources unavailable; deciding on the plugin's own memory", "resource", r.name, "err", err)
		return account{}
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	acct.holdings = make([]holding, 0, len(hs))
	acct.known = make(map[types.UID]bool, len(hs))
	for _, h := range hs {
		pod, ok := byName[h.Namespace+"/"+h.Pod]
		if !ok {
			continue // a pod the cache does not know (yet): nothing to record
		}
		acct.known[pod.UID] = true
		if h.Known() {
			continue
		}
		cards, ids, err := r.cardsOf(h.IDs)
		if err != nil {
			p.log.Error(err, "Kubelet reports units of several cards for one container", "pod", klog.KObj(pod), "container", h.Container)
			continue
		}
		acct.holdings = append(acct.holdings, holding{Namespace: h.Namespace, Pod: h.Pod, UID: pod.UID, Container: h.Container, Cards: cards, IDs: ids})
	}
	return acct
}

// merge puts the accounts read into their ledgers (callers hold allocMu)
// and returns the pods they reopened. It merges, not replaces: the kubelet
// records a container's devices only after the Allocate it answers, so the
// latest decision may not be in the account yet; and a guess made after
// the read started is kept whatever the read says (ledger.confirm).
func (a accounts) merge() []types.UID {
	var reopened []types.UID
	for _, acct := range []account{a.units, a.whole} {
		if !acct.ok {
			continue
		}
		for _, h := range acct.holdings {
			reopened = append(reopened, acct.res.ledger.confirm(h, acct.gen)...)
		}
	}
	return reopened
}

// errUnitsHeld: the kubelet handed out units its own account shows held by
// a container of another live pod.
var errUnitsHeld = errors.New("the kubelet handed out units its own account shows held by another pod's container")

// heldByOther returns the holding, in this account, of a container of a
// live pod (api.MayStartContainers) that holds one of ids, and whether it
// holds exactly ids.
//
// The account is read at the start of the kubelet's call, after the
// kubelet reserved ids, and the kubelet releases a pod's units only before
// it reserves (UpdateAllocatedDevices at the start of each allocation), and
// never calls Allocate for a container it already holds devices for
// (devicesToAllocate): a holder in this read held the units when they were
// handed out again. That is the kubelet's double allocation
// (kubernetes/kubernetes#137534, after a PodResources List dropped a
// reservation in flight).
func (a account) heldByOther(v podView, ids []string) (h holding, exact, held bool) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	key := podresources.IDsKey(ids)
	for _, h := range a.holdings {
		if !api.MayStartContainers(v.byUID[h.UID]) {
			continue
		}
		for _, id := range h.IDs {
			if want[id] {
				return h, podresources.IDsKey(h.IDs) == key, true
			}
		}
	}
	return holding{}, false, false
}

// refuseHeld reports whether an Allocate of ids that the account shows
// held by h's container is refused: always for a partial overlap (no
// container is re-allocated part of its units); for exactly h's units once
// h's pod was admitted (its status shows it, or the plugin answered the
// PreStartContainer of h's container). Exactly the units of a container
// not known to be admitted is taken for a re-allocation of it, as before
// the account was read per pod (decide).
func (p accountReader) refuseHeld(v podView, h holding, exact bool) bool {
	if !exact {
		return true
	}
	pod := v.byUID[h.UID]
	if api.Admitted(pod) {
		return true
	}
	return p.state.units.isStarted(h.UID, h.Container)
}

// heldUnits is the set of units this account shows held by containers of
// live pods.
func (a account) heldUnits(v podView) map[string]bool {
	out := map[string]bool{}
	for _, h := range a.holdings {
		if api.MayStartContainers(v.byUID[h.UID]) {
			for _, id := range h.IDs {
				out[id] = true
			}
		}
	}
	return out
}

// heldErr says which pod holds the units, for the kubelet's event.
func heldErr(h holding, ids []string) error {
	return fmt.Errorf("%w: %d units of card %s, some held by pod %s/%s container %s; refused so that two containers do not share that memory (a PodResources List during an admission makes kubelet v1.34 forget a reservation: kubernetes/kubernetes#137534); recreate the pod",
		errUnitsHeld, len(ids), h.card(), h.Namespace, h.Pod, h.Container)
}
