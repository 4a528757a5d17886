package allocator

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Derived builds once per workload value however many goroutines ask at
// once (EvaluateParallel's workers on a new workload), every caller gets
// that one value, and Observe and Reindex make the next call build again.
func TestDerivedBuildsOnceAndAgainAfterObserveOrReindex(t *testing.T) {
	type key struct{}
	var builds atomic.Int32
	build := func(w *Workload) any {
		builds.Add(1)
		n := len(w.Shapes)
		return &n
	}
	w := &Workload{}
	w.Observe(Shape{Units: 1})
	got := make([]any, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = w.Derived(key{}, build) })
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d builds for 8 concurrent calls, want 1", n)
	}
	for i, v := range got {
		if v != got[0] {
			t.Fatalf("call %d got another value than call 0", i)
		}
	}
	type other struct{}
	if v := w.Derived(other{}, func(*Workload) any { return "other" }); v != "other" || w.Derived(key{}, build) != got[0] {
		t.Fatalf("a second key: got %v, and the first key's value changed", v)
	}
	w.Observe(Shape{Units: 2})
	if v := w.Derived(key{}, build).(*int); *v != 2 || builds.Load() != 2 {
		t.Fatalf("after Observe: value %d after %d builds, want 2 shapes after 2 builds", *v, builds.Load())
	}
	w.Shapes = w.Shapes[:1]
	w.Reindex()
	if v := w.Derived(key{}, build).(*int); *v != 1 || builds.Load() != 3 {
		t.Fatalf("after Reindex: value %d after %d builds, want 1 shape after 3 builds", *v, builds.Load())
	}
}

func TestWorkloadNear(t *testing.T) {
	shape := func(units int64, weight float64) Shape { return Shape{Units: units, Weight: weight} }
	base := &Workload{Shapes: []Shape{shape(10, 50), shape(20, 50)}}
	for _, tc := range []struct {
		name string
		o    *Workload
		tol  float64
		want bool
	}{
		{"scaled weights, same shares", &Workload{Shapes: []Shape{shape(10, 100), shape(20, 100)}}, 0, true},
		{"shares moved 0.005", &Workload{Shapes: []Shape{shape(10, 101), shape(20, 99)}}, 0.01, true},
		{"shares moved 0.02", &Workload{Shapes: []Shape{shape(10, 104), shape(20, 96)}}, 0.01, false},
		{"a new shape", &Workload{Shapes: []Shape{shape(10, 50), shape(20, 50), shape(30, 0.001)}}, 0.5, false},
		{"another shape", &Workload{Shapes: []Shape{shape(10, 50), shape(40, 50)}}, 0.5, false},
		{"model capacity", &Workload{Shapes: []Shape{shape(10, 50), shape(20, 50)}, ModelCapacity: map[string]ModelCapacity{"A": {Cards: 1, Units: 80}}}, 0.5, false},
		{"none", nil, 0.5, false},
	} {
		if got := base.Near(tc.o, tc.tol); got != tc.want {
			t.Errorf("%s: Near = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.o.Near(base, tc.tol); got != tc.want {
			t.Errorf("%s, the other way: Near = %v, want %v", tc.name, got, tc.want)
		}
	}
	var none *Workload
	if !none.Near(nil, 0) {
		t.Error("nil is not Near nil")
	}
}
