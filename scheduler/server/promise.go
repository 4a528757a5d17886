package server

import (
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// Promises: the cards a preemption frees are kept for the preemptor
// (docs/design.md, "Preemption"). The preempt verb's answer is an offer; it
// becomes a promise for node N once the preemptor is nominated there and one
// of N's victims is terminating or gone. While it holds, pods of equal or
// lower priority decide on N as if the preemptor held its cards
// (allocator.Hold), and the preemptor decides on those cards only
// (allocator.Only). A promise only adds use, never frees: victims count until
// the informer shows them gone, and bind assumes on the real snapshot. It ends
// when the preemptor is bound, deleted, nominated elsewhere, or at promiseTTL.

// promiseTTL bounds how long an offer is kept: longer than kube-scheduler's
// backoff plus a victim's usual termination grace period.
const promiseTTL = 10 * time.Minute

// podRef names a pod.
type podRef struct {
	namespace, name string
	uid             types.UID
}

// offer is the preempt verb's answer for one node.
type offer struct {
	// held are the preemptor's grants once the victims are gone.
	held []allocator.Grant
	// cards are the card indexes of held.
	cards   []int
	victims []podRef
}

// pending is a preemptor's offers, by node.
type pending struct {
	pod      podRef
	priority int32
	at       time.Time
	offers   map[string]offer
}

// promise is an offer in force.
type promise struct {
	uid      types.UID
	priority int32
	node     string
	offer
}

// promises holds the offers. The filter's hot path reads count alone while
// there are none.
type promises struct {
	mu    sync.Mutex
	byPod map[types.UID]*pending
	count atomic.Int32
}

// offer records the preempt verb's answer for pod, replacing any earlier
// one; no offers drop it.
func (ps *promises) offer(pod *corev1.Pod, prio int32, offers map[string]offer, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byPod == nil {
		ps.byPod = map[types.UID]*pending{}
	}
	if len(offers) == 0 {
		delete(ps.byPod, pod.UID)
	} else {
		ps.byPod[pod.UID] = &pending{pod: podRef{namespace: pod.Namespace, name: pod.Name, uid: pod.UID}, priority: prio, at: now, offers: offers}
	}
	ps.count.Store(int32(len(ps.byPod)))
}

// inForce returns the promises in force, reading the preemptors and the
// victims from pods, and drops the offers that can no longer become one.
func (ps *promises) inForce(pods corelisters.PodLister, now time.Time) []promise {
	if ps.count.Load() == 0 || pods == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []promise
	for uid, p := range ps.byPod {
		pod, err := pods.Pods(p.pod.namespace).Get(p.pod.name)
		if err != nil || pod.UID != uid || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || now.Sub(p.at) > promiseTTL {
			delete(ps.byPod, uid)
			continue
		}
		o, ok := p.offers[pod.Status.NominatedNodeName]
		if !ok || !acted(pods, o.victims) {
			continue
		}
		out = append(out, promise{uid: uid, priority: p.priority, node: pod.Status.NominatedNodeName, offer: o})
	}
	ps.count.Store(int32(len(ps.byPod)))
	return out
}

// acted reports whether kube-scheduler evicted at least one of the victims:
// it is terminating or gone.
func acted(pods corelisters.PodLister, victims []podRef) bool {
	for _, v := range victims {
		pod, err := pods.Pods(v.namespace).Get(v.name)
		if err != nil || pod.UID != v.uid || pod.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// promised returns snaps with the promises in force applied for pod: the
// names[i] node's snapshot snaps[i] is replaced by a copy (the cache's
// snapshots are never changed). snaps is changed in place and returned.
func (s *Server) promised(pod *corev1.Pod, names []string, snaps []*allocator.Node) []*allocator.Node {
	if s.promises.count.Load() == 0 {
		return snaps
	}
	prio := podPriority(pod)
	for _, p := range s.promises.inForce(s.pods, s.clock.Now()) {
		for i, name := range names {
			if name != p.node || snaps[i] == nil {
				continue
			}
			switch {
			case p.uid == pod.UID:
				snaps[i] = allocator.Only(snaps[i], p.cards)
			case prio <= p.priority:
				snaps[i] = allocator.Hold(snaps[i], p.held)
			}
		}
	}
	return snaps
}
