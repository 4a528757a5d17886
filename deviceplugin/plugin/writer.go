package plugin

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// recordQueue holds the records Allocate decided for a resource whose
// containers the kubelet starts only after PreStartContainer (gpu-mem
// units): those are written after Allocate has returned, by the plugin's
// record writer, so that the kubelet's admission of the node's next pod (one
// at a time, its sync loop blocked on this call) does not wait for an API
// server round trip. The record is still right before the container starts:
// PreStartContainer writes it, and waits for the write. Whole cards have no
// PreStartContainer: Allocate writes their records before it returns. A
// write that fails, or one queued when the plugin stops, is the
// reconciler's to redo, as a failed write in Allocate always was.
type recordQueue struct {
	mu      sync.Mutex
	pending []podRef
	serving bool
	// writing: the writer has taken records it has not finished writing.
	writing bool
	wake    chan struct{}
	// pods serializes the writes of one pod's record; wrote is the record each last wrote.
	pods   [32]sync.Mutex
	wrote  map[types.UID]api.Assignment
	epochs map[types.UID]uint64
}

func newRecordQueue() *recordQueue {
	return &recordQueue{wake: make(chan struct{}, 1), wrote: map[types.UID]api.Assignment{}, epochs: map[types.UID]uint64{}}
}

// lockPod serializes the plugin's writes of uid's record. The record writer and
// PreStartContainer both write a GPU pod's record, often at the same moment: unserialized, each
// made the other's conditional write conflict, and under a burst the retries ran past
// recordTimeout, failing the container start.
func (q *recordQueue) lockPod(uid types.UID) (unlock func()) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	m := &q.pods[h.Sum32()%uint32(len(q.pods))]
	m.Lock()
	return m.Unlock
}

// lastWrite is the record the plugin last wrote (or found) on uid's pod, if any, and the epoch
// of uid's records a write started now must give setLastWrite.
func (q *recordQueue) lastWrite(uid types.UID) (a api.Assignment, ok bool, epoch uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a, ok = q.wrote[uid]
	return a.Clone(), ok, q.epochs[uid]
}

// setLastWrite remembers a as on uid's pod (ok false: forgets what was), unless another write
// of the record (forgetWrite) came since epoch.
func (q *recordQueue) setLastWrite(uid types.UID, a api.Assignment, ok bool, epoch uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !ok || q.epochs[uid] != epoch {
		delete(q.wrote, uid)
		return
	}
	q.wrote[uid] = a.Clone()
}

// forgetWrite is called after any other write of uid's record (reconciliation, a swap's
// partner): the next kubelet call reads the record again.
func (q *recordQueue) forgetWrite(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.wrote, uid)
	q.epochs[uid]++
}

// retainWrites forgets the records of pods not in live.
func (q *recordQueue) retainWrites(live map[types.UID]bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for uid := range q.wrote {
		if !live[uid] {
			delete(q.wrote, uid)
		}
	}
	for uid := range q.epochs {
		if !live[uid] {
			delete(q.epochs, uid)
		}
	}
}

// put queues refs for the writer and reports whether one serves the queue
// (false: the caller writes them itself).
func (q *recordQueue) put(refs []podRef) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.serving {
		return false
	}
	q.pending = append(q.pending, refs...)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

func (q *recordQueue) take() []podRef {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	q.writing = len(out) > 0
	return out
}

func (q *recordQueue) done() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.writing = false
}

func (q *recordQueue) setServing(on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.serving = on
}

// queueRecords hands an Allocate's records to the writer, or writes them
// now when no writer runs (the plugin's Run starts one).
func (p recorder) queueRecords(ctx context.Context, refs []podRef) {
	if len(refs) == 0 {
		return
	}
	if !p.records.put(refs) {
		p.writeRecords(ctx, refs)
	}
}

// runRecordWriter writes the queued records until ctx ends.
func (p recorder) runRecordWriter(ctx context.Context) {
	p.records.setServing(true)
	defer p.records.setServing(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.records.wake:
			refs := slices.Compact(slices.SortedFunc(slices.Values(p.records.take()), func(a, b podRef) int { return strings.Compare(string(a.UID), string(b.UID)) }))
			var wg sync.WaitGroup
			for part := range slices.Chunk(refs, max(1, (len(refs)+recordWriters-1)/recordWriters)) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.writeRecords(ctx, part)
				}()
			}
			wg.Wait()
			p.records.done()
		}
	}
}

// recordWriters is how many records the writer writes at once: a burst's
// Allocates queue a record each faster than one API round trip, and a
// container whose record the writer has not written yet has its
// PreStartContainer write it (and wait for that write).
const recordWriters = 8
