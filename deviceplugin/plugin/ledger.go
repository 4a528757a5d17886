package plugin

import (
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// holding is one container's units as the plugin knows them: from its own
// Allocate decisions (a best guess of which container the kubelet meant) or
// from the kubelet's PodResources API (the truth).
type holding struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
	Card           string
	IDs            []string
}

type ckey struct {
	uid       types.UID
	container string
}

// ledger remembers which container holds which units, and which pods the
// plugin refused. Safe for concurrent use.
type ledger struct {
	mu       sync.Mutex
	byCont   map[ckey]holding
	byIDs    map[string]ckey
	rejected map[types.UID]bool
	// evicted are pods one of whose guessed holdings the kubelet's truth
	// replaced: their containers are pending again, whatever the record says.
	evicted map[types.UID]bool
}

func newLedger() *ledger {
	return &ledger{byCont: map[ckey]holding{}, byIDs: map[string]ckey{}, rejected: map[types.UID]bool{}, evicted: map[types.UID]bool{}}
}

func idsKey(ids []string) string {
	s := append([]string(nil), ids...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// set records h, replacing what the container held before and any other
// container recorded with the same units (a guess the truth corrects).
func (l *ledger) set(h holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ckey{h.UID, h.Container}
	if old, ok := l.byCont[k]; ok {
		delete(l.byIDs, idsKey(old.IDs))
	}
	ik := idsKey(h.IDs)
	if other, ok := l.byIDs[ik]; ok && other != k {
		delete(l.byCont, other)
		l.evicted[other.uid] = true
	}
	l.byCont[k] = h
	l.byIDs[ik] = k
	delete(l.evicted, h.UID)
}

func (l *ledger) isEvicted(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted[uid]
}

func (l *ledger) byDeviceIDs(ids []string) (holding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.byIDs[idsKey(ids)]
	if !ok {
		return holding{}, false
	}
	return l.byCont[k], true
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

func (l *ledger) reject(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected[uid] = true
}

func (l *ledger) isRejected(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejected[uid]
}

// retain forgets pods not in live.
func (l *ledger) retain(live map[types.UID]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, h := range l.byCont {
		if !live[k.uid] {
			delete(l.byCont, k)
			delete(l.byIDs, idsKey(h.IDs))
		}
	}
	for uid := range l.rejected {
		if !live[uid] {
			delete(l.rejected, uid)
		}
	}
	for uid := range l.evicted {
		if !live[uid] {
			delete(l.evicted, uid)
		}
	}
}
