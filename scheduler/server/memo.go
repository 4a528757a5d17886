package server

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// The evaluation memo: kube-scheduler asks filter (and prioritize) about the
// same nodes for pod after pod, and between two pods of a burst only the
// node that took the last pod changed. A node's decision is a pure function
// of the policy, the pod's request, the workload and the node's snapshot
// (allocator.Policy.Evaluate), and the cache publishes a fresh snapshot for
// every change (never edits one): so a node whose snapshot is the same
// pointer as in an earlier call with the same policy, request and workload
// gets the same decision, and is not evaluated again.
//
// A workload changes whenever the cache sees a new pod (it counts every
// pod's shape once), not when a pod binds: during a burst created ahead of
// its scheduling the memo holds from pod to pod; while pods are still being
// created it misses, and each call costs what it cost without it.

// memoMinNodes: calls with fewer candidate nodes are evaluated in full.
// They are cheap, and they would evict the large entries that pay (in best
// mode prioritize gets only filter's best nodes, 16 by default).
const memoMinNodes = 256

// memoEntries is how many recent calls (distinct requests and candidate
// counts) the memo keeps. Each holds one decision and one snapshot pointer
// per candidate node: ~90 bytes a node, 450 kB at 5,000 nodes.
const memoEntries = 4

// memoKey is everything a decision depends on besides the node's snapshot.
type memoKey struct {
	policy *allocator.Policy
	w      *allocator.Workload
	host   api.HostResources
	// demands is the request's containers in order, names and sizes.
	demands string
	// nodes is the number of candidate nodes: an entry is matched to a
	// call position by position.
	nodes int
}

// memoKeyFor returns the key of a call, or false when the call is not
// memoized: a pod with a card choice (its filter depends on the models the
// cluster knows as the call saw them; such pods are rare) or too few nodes.
func memoKeyFor(p *allocator.Policy, w *allocator.Workload, preq api.PodRequest, nodes int) (memoKey, bool) {
	if nodes < memoMinNodes || !preq.Cards.Empty() || preq.ChoiceErr != nil {
		return memoKey{}, false
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
	return memoKey{policy: p, w: w, host: preq.Host, demands: b.String(), nodes: nodes}, true
}

// memoEntry is one call's snapshots and decisions; never changed once
// published, so readers need no lock.
type memoEntry struct {
	key       memoKey
	snaps     []*allocator.Node
	decisions []allocator.Decision
}

// evalMemo keeps the most recent entries, the newest first.
type evalMemo struct {
	mu      sync.Mutex
	entries [memoEntries]*memoEntry
}

func (m *evalMemo) lookup(k memoKey) *memoEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e != nil && e.key == k {
			return e
		}
	}
	return nil
}

// publish puts e first, dropping the entry with the same key, else the
// oldest.
func (m *evalMemo) publish(e *memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.entries[:], func(x *memoEntry) bool { return x != nil && x.key == e.key })
	if i < 0 {
		i = len(m.entries) - 1
	}
	copy(m.entries[1:i+1], m.entries[:i])
	m.entries[0] = e
}

// evaluateMemo fills decisions[i] for every non-nil snaps[i]: from the memo
// where the node's snapshot is the one an earlier call with the same key
// evaluated, by the policy for the others. It reports false when done
// closed first (decisions are then unusable), how many nodes it evaluated
// and took from the memo, and whether the memo kept snaps (which the caller
// must then leave unchanged).
func (s *Server) evaluateMemo(done <-chan struct{}, k memoKey, in decisionInput, w *allocator.Workload, snaps []*allocator.Node, decisions []allocator.Decision) (complete bool, evaluated, reused int, kept bool) {
	prev := s.memo.lookup(k)
	var miss []int
	for i, n := range snaps {
		switch {
		case n == nil:
		case prev != nil && prev.snaps[i] == n:
			decisions[i] = prev.decisions[i]
			reused++
		default:
			miss = append(miss, i)
		}
	}
	if len(miss) == 0 {
		return true, 0, reused, false
	}
	if prev == nil {
		if !in.policy.policy.EvaluateParallelUntil(done, snaps, in.req, w, decisions, s.workers) {
			return false, 0, 0, false
		}
	} else {
		nodes := make([]*allocator.Node, len(miss))
		for j, i := range miss {
			nodes[j] = snaps[i]
		}
		out := make([]allocator.Decision, len(miss))
		if !in.policy.policy.EvaluateParallelUntil(done, nodes, in.req, w, out, s.workers) {
			return false, 0, 0, false
		}
		for j, i := range miss {
			decisions[i] = out[j]
		}
	}
	if prev != nil && reused == 0 {
		// Nothing matched position by position: the caller reorders its
		// candidates between calls (kube-scheduler's own filter lists the
		// feasible nodes from a rotating start, in parallel), and keeping
		// this call would only cost a copy of its decisions.
		return true, len(miss), 0, false
	}
	s.memo.publish(&memoEntry{key: k, snaps: snaps, decisions: slices.Clone(decisions)})
	return true, len(miss), reused, true
}
