package server

import "sync"

// slicePool recycles a call's large slices (decisions, snapshots, decoded
// names: hundreds of kB a call at 5,000 nodes) between calls.
type slicePool[T any] struct{ p sync.Pool }

// get returns a slice of length n, every element zero.
func (sp *slicePool[T]) get(n int) []T {
	if p, ok := sp.p.Get().(*[]T); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]T, n)
}

// put hands s back once nothing refers to it any more. It is cleared first:
// a pooled slice keeps nothing alive and comes back zeroed.
func (sp *slicePool[T]) put(s []T) {
	if s == nil {
		return
	}
	clear(s[:cap(s)])
	sp.p.Put(&s)
}
