package plugin

import (
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
)

// nodeState is the node's state: which card is held by whom, in what form
// (units of it, or the card whole). Both resources' fronts read and write
// it; a second kubelet API (DRA) would be one more front on it.
type nodeState struct {
	// mu (allocMu) serialises decisions over the ledgers and a pod
	// snapshot; held for no I/O but the informer cache's List.
	mu sync.Mutex
	// units and whole are the ledgers of the two resources.
	units, whole *ledger
	// held signals changes of which cards are in use, one way or the other.
	held *broadcast
}

func newNodeState() nodeState {
	return nodeState{units: newLedger(false), whole: newLedger(true), held: newBroadcast()}
}

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

// locked is the one step every decision starts with: take allocMu, list
// the pod cache, merge the accounts read before (outside the lock) into
// their ledgers, and call fn with the listing and the pods the merge
// reopened; allocMu is released when fn returns. A cache that cannot be
// listed gives its error and fn is not called.
func (p *Plugin) locked(accts accounts, fn func(v podView, reopened []types.UID)) error {
	p.state.mu.Lock()
	defer p.state.mu.Unlock()
	v, err := p.view()
	if err != nil {
		return err
	}
	fn(v, accts.merge())
	return nil
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

// podRef names a pod for a record write.
type podRef struct {
	Namespace, Name string
	UID             types.UID
}

// cardUse is what the plugin knows to be held on each card (callers hold
// allocMu or accept a moment's staleness): the holdings of both ledgers of
// pods that still hold their devices (api.HoldsUnits), and, for containers
// neither ledger shows, the Allocated records of such pods.
func (p *Plugin) cardUse(v podView) allocate.Use {
	u := allocate.Use{Shared: map[string]string{}, Whole: map[string]string{}}
	name := func(ns, pod, container string) string { return ns + "/" + pod + " container " + container }
	seen := map[ckey]bool{}
	for _, l := range []struct {
		ledger *ledger
		use    map[string]string
	}{{p.state.units, u.Shared}, {p.state.whole, u.Whole}} {
		for _, h := range l.ledger.all() {
			if pod := v.byUID[h.UID]; api.HoldsUnits(pod) {
				for _, c := range h.Cards {
					l.use[c] = name(h.Namespace, h.Pod, h.Container)
				}
				seen[ckey{h.UID, h.Container}] = true
			}
		}
	}
	for _, pod := range v.pods {
		a, err := p.rec.record(pod)
		if err != nil || !api.RecordHolds(pod, a) {
			continue
		}
		for _, c := range a.Containers {
			if !seen[ckey{pod.UID, c.Name}] {
				u.Shared[c.CardUUID] = name(pod.Namespace, pod.Name, c.Name)
			}
		}
		for _, w := range a.WholeCards {
			if !seen[ckey{pod.UID, w.Name}] {
				for _, c := range w.CardUUIDs {
					u.Whole[c] = name(pod.Namespace, pod.Name, w.Name)
				}
			}
		}
	}
	return u
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
