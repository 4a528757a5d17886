package allocator_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// Splitting the nodes of one call over goroutines must not change a single
// decision, for every policy, whatever the split (including uneven chunks and
// nodes the cache does not know, which stay nil).
func TestEvaluateParallelEqualsEvaluateAll(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	w := benchWorkload(rng)
	nodes := benchNodes(rng, 1213)
	ptrs := make([]*allocator.Node, len(nodes))
	for i := range nodes {
		if i%97 != 0 {
			ptrs[i] = &nodes[i]
		}
	}
	req := allocator.Request{Demands: []allocator.Demand{{Container: "c", Units: 300}}, Host: allocator.HostResources{CPUMilli: 4000, MemoryMiB: 8192}}
	for _, name := range registry.Names() {
		p, _ := registry.Lookup(name)
		want := make([]allocator.Decision, len(ptrs))
		p.EvaluateAll(ptrs, req, w, want)
		for _, workers := range []int{0, 1, 2, 3, 4, 7, 64} {
			t.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(t *testing.T) {
				got := make([]allocator.Decision, len(ptrs))
				p.EvaluateParallel(ptrs, req, w, got, workers)
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("EvaluateParallel differs from EvaluateAll (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// BenchmarkFragEvaluateParallel is the extender's path with --parallelism
// 1 and 2 (the default is one per CPU); workers=2 needs 2 cores (-cpu 2) to
// gain anything.
func BenchmarkFragEvaluateParallel(b *testing.B) {
	p, err := registry.Lookup("frag")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ n, workers int }{{1213, 1}, {1213, 2}, {5000, 1}, {5000, 2}} {
		n, workers := c.n, c.workers
		b.Run(fmt.Sprintf("nodes=%d/workers=%d", n, workers), func(b *testing.B) {
			w, nodes, req, decisions := benchCase(p, n)
			ptrs := pointers(nodes)
			b.ReportAllocs()
			for b.Loop() {
				p.EvaluateParallel(ptrs, req, w, decisions, workers)
				_ = allocator.BestNodes(decisions)
			}
		})
	}
}

// EvaluateParallelUntil with a done channel that never closes is exactly
// EvaluateParallel; with one already closed it evaluates no node (out stays
// as it was) and says it did not finish, whatever the split.
func TestEvaluateParallelUntilStopsWhenDone(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	w := benchWorkload(rng)
	ptrs := pointers(benchNodes(rng, 1213))
	req := allocator.Request{Demands: []allocator.Demand{{Container: "c", Units: 300}, {Container: "d", Units: 200}}}
	open, shut := make(chan struct{}), make(chan struct{})
	close(shut)
	for _, name := range registry.Names() {
		p, _ := registry.Lookup(name)
		want := make([]allocator.Decision, len(ptrs))
		p.EvaluateParallel(ptrs, req, w, want, 1)
		for _, workers := range []int{1, 2, 4} {
			got := make([]allocator.Decision, len(ptrs))
			if !p.EvaluateParallelUntil(open, ptrs, req, w, got, workers) {
				t.Errorf("%s/workers=%d: not complete with done open", name, workers)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s/workers=%d: differs from EvaluateParallel (-want +got):\n%s", name, workers, diff)
			}
			got = make([]allocator.Decision, len(ptrs))
			if p.EvaluateParallelUntil(shut, ptrs, req, w, got, workers) {
				t.Errorf("%s/workers=%d: complete with done closed", name, workers)
			}
			if diff := cmp.Diff(make([]allocator.Decision, len(ptrs)), got); diff != "" {
				t.Errorf("%s/workers=%d: evaluated nodes after done closed:\n%s", name, workers, diff)
			}
		}
	}
}

// pointers is &nodes[i] for every node.
func pointers(nodes []allocator.Node) []*allocator.Node {
	out := make([]*allocator.Node, len(nodes))
	for i := range nodes {
		out[i] = &nodes[i]
	}
	return out
}
