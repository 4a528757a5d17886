package registry

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/allocatortest"
)

func TestLookup(t *testing.T) {
	if _, err := Lookup(Default); err != nil {
		t.Errorf("default policy: %v", err)
	}
	_, err := Lookup("tetris")
	if err == nil {
		t.Fatal("unknown policy accepted")
	}
	for _, n := range Names() {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %s", err, n)
		}
	}
}

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
	// Nodes of up to 16 cards, as frag's own property tests draw them.
	for iter := 0; iter < 4000; iter++ {
		w, node, req := allocatortest.RandomCase(rng, 16)
		other, _, _ := allocatortest.RandomCase(rng, 16)
		for _, name := range Names() {
			p, _ := Lookup(name)
			isFrag := name == "frag"
			if !p.IgnoresWorkload && !isFrag {
				continue
			}
			want := p.Evaluate(node, req, w)
			for _, w2 := range []*allocator.Workload{other, nil} {
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
