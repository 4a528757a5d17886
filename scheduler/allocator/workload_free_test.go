package allocator

import (
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestPoliciesThatIgnoreTheWorkloadDecideTheSameUnderAny: a policy marked
// IgnoresWorkload decides every random node and pod the same under two
// unrelated workloads and none; the extender's memo keeps its decisions
// across new pods on that word. frag, which reads the workload, must
// differ somewhere, or the test could not tell.
func TestPoliciesThatIgnoreTheWorkloadDecideTheSameUnderAny(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	marked := 0
	fragDiffers := 0
	for _, name := range Names() {
		p, _ := Lookup(name)
		if !p.IgnoresWorkload {
			continue
		}
		marked++
	}
	if marked == 0 {
		t.Fatal("no policy is marked IgnoresWorkload")
	}
	for iter := 0; iter < 4000; iter++ {
		w, node, req := randomFragCase(rng)
		other, _, _ := randomFragCase(rng)
		for _, name := range Names() {
			p, _ := Lookup(name)
			isFrag := name == "frag"
			if !p.IgnoresWorkload && !isFrag {
				continue
			}
			want := p.Evaluate(node, req, w)
			for _, w2 := range []*Workload{other, nil} {
				got := p.Evaluate(node, req, w2)
				same := cmp.Diff(want, got, cmpopts.EquateEmpty()) == ""
				switch {
				case isFrag && !same:
					fragDiffers++
				case p.IgnoresWorkload && !same:
					t.Fatalf("iteration %d: %s, marked IgnoresWorkload, decides differently under another workload (-w +other):\n%s",
						iter, name, cmp.Diff(want, got, cmpopts.EquateEmpty()))
				}
			}
		}
	}
	if fragDiffers == 0 {
		t.Fatal("frag decided every case the same under every workload: the cases do not exercise the workload")
	}
	t.Logf("%d policies marked; frag differed in %d comparisons", marked, fragDiffers)
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
