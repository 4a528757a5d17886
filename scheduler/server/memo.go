package server

import (
	"strconv"
	"strings"
	"sync"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The evaluation memo (docs/design.md, "How the extender keeps filter
// cheap"): a node's decision is a pure function of the policy, the request,
// the workload and the node's snapshot, and the cache replaces a snapshot on
// every change, so a node whose snapshot pointer is unchanged for the same
// key is not evaluated again. Nodes are matched by the cache's node ID, not
// position (kube-scheduler's candidates come in a new order on almost every
// call), in a slice indexed by ID: at 5,000 nodes a map lookup by name cost
// more than the rest of a memoized call. IDs are reused; the snapshot pointer
// tells the nodes apart. Policies that ignore the workload leave it out of
// the key; a key gets a table only when seen twice, so calls whose workload
// is new every time cost no more than without the memo.

// memoMinNodes: calls with fewer candidate nodes are evaluated in full.
// They are cheap, and in best mode prioritize gets only filter's best nodes
// (16 by default).
const memoMinNodes = 256

// memoMaxID bounds a table's length: a node with a larger ID (a cluster
// of over a million nodes, or a caller's own numbering) is not memoized.
const memoMaxID = 1 << 20

// memoEntries is how many keys (policy, request, workload) the memo keeps
// a table for. A table holds one snapshot pointer and decision per node
// ID: 88 bytes a node, ~440 kB at 5,000 nodes, ~7 MB for all 16. A burst
// of pods of more sizes than this at once evicts every table before its
// next use (4 tables: p99 28-32 ms with 16 sizes at 5,000 nodes against
// 9 ms with 16; docs/design.md).
const memoEntries = 16

// memoKey is everything a decision depends on besides the node's snapshot.
type memoKey struct {
	policy *allocator.Policy
	w      *allocator.Workload
	host   api.HostResources
	// demands is the request's containers in order, names and sizes.
	demands string
}

// memoKeyFor returns the key of a call, or false when the call is not
// memoized: a pod with a card choice (its filter depends on the models the
// cluster knows as the call saw them; such pods are rare) or too few nodes.
func memoKeyFor(p *allocator.Policy, w *allocator.Workload, preq api.PodRequest, nodes int) (memoKey, bool) {
	if nodes < memoMinNodes || !preq.Cards.Empty() || preq.ChoiceErr != nil {
		return memoKey{}, false
	}
	if p.IgnoresWorkload {
		w = nil // any workload gives the same decisions: new pods keep the table
	}
	var b strings.Builder
	for _, c := range preq.Containers {
		b.WriteString(strconv.Quote(c.Name))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(c.Units, 10))
		b.WriteByte(';')
	}
	for _, c := range preq.WholeCards {
		b.WriteString(strconv.Quote(c.Name))
		b.WriteString("=whole:")
		b.WriteString(strconv.Itoa(c.Cards))
		b.WriteByte(';')
	}
	return memoKey{policy: p, w: w, host: preq.Host, demands: b.String()}, true
}

// memoSlot is a node's decision and the snapshot it was made on.
type memoSlot struct {
	snap     *allocator.Node
	decision allocator.Decision
}

// memoTable is one key's decisions by node ID. Slots are replaced, never
// changed: a reader copies the decision out under the read lock.
type memoTable struct {
	key  memoKey
	mu   sync.RWMutex
	byID []memoSlot
}

// evalMemo keeps the tables of the most recent keys, the newest first, and
// the keys seen once (no table yet).
type evalMemo struct {
	mu     sync.Mutex
	tables [memoEntries]*memoTable
	seen   [memoEntries]memoKey
	nseen  int
}

// table returns k's table: the existing one, a new one the second time k is
// seen, else nil (k is remembered as seen).
func (m *evalMemo) table(k memoKey) *memoTable {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, t := range m.tables {
		if t != nil && t.key == k {
			copy(m.tables[1:i+1], m.tables[:i]) // newest first
			m.tables[0] = t
			return t
		}
	}
	for i := range min(m.nseen, len(m.seen)) {
		if m.seen[i] == k {
			t := &memoTable{key: k}
			copy(m.tables[1:], m.tables[:len(m.tables)-1])
			m.tables[0] = t
			m.seen[i] = memoKey{}
			return t
		}
	}
	m.seen[m.nseen%len(m.seen)] = k
	m.nseen++
	return nil
}

// evaluateMemo fills decisions[i] for every non-nil snaps[i]; ids, if not
// nil, are the snapshots' IDs (read beside them, it spares a cache miss a
// node): from the memo
// where the node's snapshot is the one a call with the same key evaluated,
// by the policy for the others. It reports false when done closed first
// (decisions are then unusable), and how many nodes it evaluated and took
// from the memo.
func (s *Server) evaluateMemo(done <-chan struct{}, k memoKey, in decisionInput, w *allocator.Workload, snaps []*allocator.Node, ids []int32, decisions []allocator.Decision) (complete bool, evaluated, reused int) {
	t := s.memo.table(k)
	if t == nil {
		if !in.policy.policy.EvaluateParallelUntil(done, snaps, in.req, w, decisions, s.workers) {
			return false, 0, 0
		}
		return true, countNodes(snaps), 0
	}
	var miss []int
	t.mu.RLock()
	for i, n := range snaps {
		if n == nil {
			continue
		}
		var id int
		if ids != nil {
			id = int(ids[i])
		} else {
			id = int(n.ID)
		}
		if id < len(t.byID) && t.byID[id].snap == n {
			decisions[i] = t.byID[id].decision
			reused++
			continue
		}
		miss = append(miss, i)
	}
	t.mu.RUnlock()
	if len(miss) == 0 {
		return true, 0, reused
	}
	nodes := make([]*allocator.Node, len(miss))
	for j, i := range miss {
		nodes[j] = snaps[i]
	}
	out := make([]allocator.Decision, len(miss))
	if !in.policy.policy.EvaluateParallelUntil(done, nodes, in.req, w, out, s.workers) {
		return false, 0, 0
	}
	t.mu.Lock()
	for j, i := range miss {
		decisions[i] = out[j]
		id := int(nodes[j].ID)
		if id < 0 || id > memoMaxID {
			continue
		}
		if id >= len(t.byID) {
			t.byID = append(t.byID, make([]memoSlot, id+1-len(t.byID))...)
		}
		// A concurrent call may have stored a newer snapshot's decision:
		// this one then replaces it and is missed once more later. A hit
		// needs the very snapshot, so no call ever gets a stale decision.
		t.byID[id] = memoSlot{snap: nodes[j], decision: out[j]}
	}
	t.mu.Unlock()
	return true, len(miss), reused
}

func countNodes(snaps []*allocator.Node) int {
	n := 0
	for _, s := range snaps {
		if s != nil {
			n++
		}
	}
	return n
}
