package allocator

import (
	"sync"
	"sync/atomic"
)

// EvaluateAll is Evaluate on every node: out[i] = Evaluate(nodes[i], …).
// A nil node is skipped (out[i] is left as it is). len(out) must be at
// least len(nodes). It shares one scratch buffer between the nodes, where
// Evaluate allocates one per call (the slice a policy's functions receive
// escapes to the heap): the extender's filter and prioritize evaluate
// thousands of nodes per call.
func (p *Policy) EvaluateAll(nodes []*Node, req Request, w *Workload, out []Decision) {
	p.evaluateAll(nil, nodes, req, w, out)
}

// evaluateAll is EvaluateAll that stops before the next node once done is
// closed (a nil done never is) and reports whether it evaluated them all.
func (p *Policy) evaluateAll(done <-chan struct{}, nodes []*Node, req Request, w *Workload, out []Decision) bool {
	scratch := make([]int64, 0, 16)
	for i, n := range nodes {
		if i%readAhead == 0 {
			// The card counts of the next readAhead nodes, read in one
			// tight loop: their snapshots' cache misses overlap instead
			// of coming one node at a time (at 5,000 nodes the snapshots
			// are beyond the L2 cache).
			if most := mostCards(nodes[i:min(i+readAhead, len(nodes))]); most > cap(scratch) {
				scratch = make([]int64, 0, most)
			}
		}
		if done != nil && closed(done) {
			return false
		}
		if n == nil {
			continue
		}
		if p.FastEvaluate != nil {
			if d, ok := p.FastEvaluate(n, req, w); ok {
				out[i] = d
				continue
			}
		}
		out[i] = p.decide(n, req, w, false, scratch)
	}
	return true
}

// readAhead is how many nodes evaluateAll reads ahead (mostCards).
const readAhead = 16

// mostCards is the largest number of cards of the nodes (nil ones have
// none): what the scratch buffer of their decisions must hold.
func mostCards(nodes []*Node) int {
	most := 0
	for _, n := range nodes {
		if n != nil {
			most = max(most, len(n.Cards))
		}
	}
	return most
}

// closed reports whether done is closed, without waiting.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// MinNodesPerWorker is the fewest nodes EvaluateParallel gives one
// goroutine: below it, starting goroutines costs more than it saves.
const MinNodesPerWorker = 256

// EvaluateParallel is EvaluateAll split over up to workers goroutines, each
// on a contiguous share of the nodes with its own scratch buffer; out is
// exactly what EvaluateAll gives. Nodes are independent, decide is pure and
// w is only read, so the split changes the time and nothing else. With
// workers <= 1, or fewer than 2×MinNodesPerWorker nodes, it does not split.
func (p *Policy) EvaluateParallel(nodes []*Node, req Request, w *Workload, out []Decision, workers int) {
	p.EvaluateParallelUntil(nil, nodes, req, w, out, workers)
}

// EvaluateParallelUntil is EvaluateParallel for a caller that may stop
// wanting the answer (the extender, when kube-scheduler's request is
// cancelled or times out): every goroutine checks done before each node and
// stops once it is closed. complete is false when it stopped; out is then
// only partly filled and must not be used. A nil done is never closed.
//
// done is a channel, not a context, so the decision stays a pure function
// of its arguments: the check costs one non-blocking receive per node
// (nanoseconds, against the microseconds a node's decision takes), and a
// node's decision is bounded by the pod's containers, which the extender
// caps (server.MaxGPUContainers).
func (p *Policy) EvaluateParallelUntil(done <-chan struct{}, nodes []*Node, req Request, w *Workload, out []Decision, workers int) (complete bool) {
	if most := len(nodes) / MinNodesPerWorker; workers > most {
		workers = most
	}
	if workers <= 1 {
		return p.evaluateAll(done, nodes, req, w, out)
	}
	chunk := (len(nodes) + workers - 1) / workers
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool
	)
	for lo := 0; lo < len(nodes); lo += chunk {
		hi := min(lo+chunk, len(nodes))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !p.evaluateAll(done, nodes[lo:hi], req, w, out[lo:hi]) {
				stopped.Store(true)
			}
		}()
	}
	wg.Wait()
	return !stopped.Load()
}
