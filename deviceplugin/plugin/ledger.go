package plugin

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/deviceplugin/podresources"
)

// holding is one container's devices of one resource (units of a card, or
// cards whole) as the plugin knows them: from its own Allocate decisions (a
// guess of which container the kubelet meant) or from the kubelet's
// PodResources API (the truth).
type holding struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
	// Cards are the cards the devices are of: the one card of units; the
	// cards themselves, sorted, for whole cards.
	Cards []string
	// IDs are the kubelet's device IDs.
	IDs []string
	// Guess: the plugin's decision at Allocate, not (yet) confirmed by the
	// kubelet's account. Gen is the ledger generation it was made at.
	Guess bool
	Gen   uint64
	// Unsure: a guess the record does not show (see units.decide): the
	// container stays out of the queue, its record waits for the truth.
	Unsure bool
}

type ckey struct {
	uid       types.UID
	container string
}

// card is the card of a units holding.
func (h holding) card() string {
	if len(h.Cards) == 0 {
		return ""
	}
	return h.Cards[0]
}

// ledger remembers, for one resource, which container holds which devices,
// which pods the plugin refused, and which pods are reopened. Safe for
// concurrent use. The node agent has one per resource it serves (gpu-mem
// units, whole cards), alike but for what makes two holdings collide
// (ledger.keys).
//
// Reopened: a pod one of whose guessed holdings the kubelet's account gave
// to another container. Its containers the ledger does not show holding
// units are pending again, whatever its record says, and its record drops
// back to Assigned (allocate.State.Reopened is the same set).
type ledger struct {
	// whole: holdings collide when they share a device (a card); otherwise
	// only when they are of exactly the same devices (units: a container is
	// never re-allocated part of another's units).
	whole  bool
	gen    uint64
	byCont map[ckey]holding
	byIDs  map[string]ckey
	marks
}

// marks are a ledger's marks of pods and containers, with the lock that
// guards them and the ledger's holdings.
type marks struct {
	mu       sync.Mutex
	rejected map[types.UID]bool
	reopened map[types.UID]bool
	// named are pods a guess of the plugin named at least once; contradicted
	// those of them whose guess the kubelet's account then gave to another
	// container. Both are kept until the pod is gone.
	named, contradicted map[types.UID]bool
	// claimed are containers of pending pods whose record a swap is moving
	// (see recorder.swap): no second swap picks them meanwhile.
	claimed map[ckey]bool
	// deferred are record moves reconciliation could not pair (recorder.swap).
	deferred []move
	// started are containers whose PreStartContainer the plugin answered
	// holding the units the kubelet's account gave them: admitted.
	started map[ckey]bool
}

func newLedger(whole bool) *ledger {
	return &ledger{whole: whole, byCont: map[ckey]holding{}, byIDs: map[string]ckey{}, marks: marks{rejected: map[types.UID]bool{},
		reopened: map[types.UID]bool{}, named: map[types.UID]bool{}, contradicted: map[types.UID]bool{}, claimed: map[ckey]bool{}, started: map[ckey]bool{},
	}}
}

// keys are the index keys of a holding of ids: each card for whole cards,
// the set of IDs for units.
func (l *ledger) keys(ids []string) []string {
	if l.whole {
		return ids
	}
	return []string{podresources.IDsKey(ids)}
}

// generation is the number of guesses made so far. A PodResources read that
// starts at generation g cannot know of guesses made after g.
func (l *ledger) generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// guess records the plugin's decision h (its Gen is set here).
func (l *ledger) guess(h holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	h.Guess, h.Gen = true, l.gen
	l.named[h.UID] = true
	l.setLocked(h)
}

// confirm records h from a kubelet account read that started at generation
// readGen, and returns the pods whose guess it contradicted. A guess made
// after the read started is left alone: the read may predate the
// allocation it guessed about (units freed and handed on meanwhile).
func (l *ledger) confirm(h holding, readGen uint64) (reopened []types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ckey{h.UID, h.Container}
	if old, ok := l.byCont[k]; ok && old.Guess && old.Gen > readGen {
		return nil
	}
	for _, ik := range l.keys(h.IDs) {
		if other, ok := l.byIDs[ik]; ok && other != k {
			if o := l.byCont[other]; o.Guess && o.Gen > readGen {
				return nil
			}
		}
	}
	h.Guess, h.Gen, h.Unsure = false, 0, false
	return l.setLocked(h)
}

// setLocked records h, replacing what the container held before and any
// other container recorded with devices that collide (a guess the truth
// corrects: that pod is reopened).
func (l *ledger) setLocked(h holding) (reopened []types.UID) {
	k := ckey{h.UID, h.Container}
	if old, ok := l.byCont[k]; ok {
		l.unindexLocked(k, old)
	}
	for _, ik := range l.keys(h.IDs) {
		other, ok := l.byIDs[ik]
		if !ok || other == k {
			continue
		}
		o := l.byCont[other]
		l.unindexLocked(other, o)
		delete(l.byCont, other)
		l.reopened[other.uid] = true
		if o.Guess {
			l.contradicted[other.uid] = true
		}
		reopened = append(reopened, other.uid)
	}
	l.byCont[k] = h
	for _, ik := range l.keys(h.IDs) {
		l.byIDs[ik] = k
	}
	if !h.Unsure {
		delete(l.reopened, h.UID)
	}
	delete(l.claimed, k)
	return reopened
}

// unindexLocked drops the index entries of k's holding h.
func (l *ledger) unindexLocked(k ckey, h holding) {
	for _, ik := range l.keys(h.IDs) {
		if l.byIDs[ik] == k {
			delete(l.byIDs, ik)
		}
	}
}

// forgetGuesses drops uid's guesses of generation gen or older (all: its holdings too), reopening
// the pod (units.decide, Plugin.recheck).
func (l *ledger) forgetGuesses(uid types.UID, gen uint64, all bool) (dropped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, h := range l.byCont {
		if k.uid == uid && (all || h.Guess && h.Gen <= gen) {
			l.unindexLocked(k, h)
			delete(l.byCont, k)
			l.reopened[uid], l.contradicted[uid], dropped = true, true, true
		}
	}
	return dropped
}

// isReopened reports whether the pod is reopened (see ledger).
func (l *marks) isReopened(uid types.UID) bool { return marked(l, l.reopened, uid) }

// reopen marks the pod reopened (see ledger): its record drops back to
// Assigned at its next write.
func (l *marks) reopen(uid types.UID) { mark(l, l.reopened, uid) }

// isNamed reports whether a guess of the plugin ever named the pod.
func (l *marks) isNamed(uid types.UID) bool { return marked(l, l.named, uid) }

func (l *marks) isContradicted(uid types.UID) bool { return marked(l, l.contradicted, uid) }

// byDeviceIDs is the container holding exactly these devices.
func (l *ledger) byDeviceIDs(ids []string) (holding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(ids) == 0 {
		return holding{}, false
	}
	k, ok := l.byIDs[l.keys(ids)[0]]
	if !ok {
		return holding{}, false
	}
	h := l.byCont[k]
	if l.whole && podresources.IDsKey(h.IDs) != podresources.IDsKey(ids) {
		return holding{}, false
	}
	return h, true
}

func (l *ledger) get(uid types.UID, container string) (holding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.byCont[ckey{uid, container}]
	return h, ok
}

// all returns every holding the ledger knows.
func (l *ledger) all() []holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]holding, 0, len(l.byCont))
	for _, h := range l.byCont {
		out = append(out, h)
	}
	return out
}

func (l *ledger) has(uid types.UID, container string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.byCont[ckey{uid, container}]
	return ok
}

func (l *ledger) forPod(uid types.UID) map[string]holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]holding{}
	for k, h := range l.byCont {
		if k.uid == uid {
			out[k.container] = h
		}
	}
	return out
}

// claim marks a pending container as being moved by a swap; false if it
// holds units or another swap has it.
func (l *ledger) claim(uid types.UID, container string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ckey{uid, container}
	if _, held := l.byCont[k]; held || l.claimed[k] {
		return false
	}
	l.claimed[k] = true
	return true
}

// deferMove keeps a move for the kubelet's next call.
func (l *marks) deferMove(m move) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deferred = append(l.deferred, m)
}

// takeDeferred returns the deferred moves and forgets them.
func (l *marks) takeDeferred() []move {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.deferred
	l.deferred = nil
	return out
}

func (l *marks) unclaim(uid types.UID, container string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.claimed, ckey{uid, container})
}

// start marks a container as started (see ledger.started).
func (l *marks) start(uid types.UID, container string) { mark(l, l.started, ckey{uid, container}) }

func (l *marks) isStarted(uid types.UID, container string) bool {
	return marked(l, l.started, ckey{uid, container})
}

func (l *marks) reject(uid types.UID) { mark(l, l.rejected, uid) }

func (l *marks) isRejected(uid types.UID) bool { return marked(l, l.rejected, uid) }

// mark adds k to set, one of the marks' sets of pods or containers, under
// their lock.
func mark[K comparable](l *marks, set map[K]bool, k K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set[k] = true
}

// marked reports whether k is in set, one of the marks' sets of pods or
// containers, under their lock.
func marked[K comparable](l *marks, set map[K]bool, k K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return set[k]
}

// retain forgets pods not in live.
func (l *ledger) retain(live map[types.UID]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, h := range l.byCont {
		if !live[k.uid] {
			l.unindexLocked(k, h)
			delete(l.byCont, k)
		}
	}
	for _, m := range []map[ckey]bool{l.claimed, l.started} {
		for k := range m {
			if !live[k.uid] {
				delete(m, k)
			}
		}
	}
	for _, m := range []map[types.UID]bool{l.rejected, l.reopened, l.named, l.contradicted} {
		for uid := range m {
			if !live[uid] {
				delete(m, uid)
			}
		}
	}
}
