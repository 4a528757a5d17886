package synth

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/replay"
)

func every(t *testing.T) []Spec {
	t.Helper()
	var out []Spec
	for f := range Fleets {
		for r := range Requests {
			out = append(out, Spec{Fleet: f, Requests: r})
		}
	}
	return out
}

func generate(t *testing.T, spec Spec, nodes int, seed int64) *replay.Trace {
	t.Helper()
	tr, err := Generate(spec, nodes, seed)
	if err != nil {
		t.Fatalf("Generate(%s, %d, %d): %v", spec, nodes, seed, err)
	}
	return tr
}

func TestSameSeedSameTraceOtherSeedAnother(t *testing.T) {
	for _, spec := range every(t) {
		a, b := generate(t, spec, 300, 7), generate(t, spec, 300, 7)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s: two traces of seed 7 differ (-first +second):\n%s", spec, diff)
		}
		c := generate(t, spec, 300, 8)
		if reflect.DeepEqual(a.Nodes, c.Nodes) || reflect.DeepEqual(a.Pods, c.Pods) {
			t.Errorf("%s: seeds 7 and 8 give the same nodes or the same pods", spec)
		}
	}
}

func TestFleetIsTheMixsProportionsExactly(t *testing.T) {
	for name, fleet := range Fleets {
		for _, nodes := range []int{1, 7, 1000, 5003} {
			tr := generate(t, Spec{Fleet: name, Requests: "mixed"}, nodes, 1)
			if len(tr.Nodes) != nodes {
				t.Fatalf("%s: %d nodes, want %d", name, len(tr.Nodes), nodes)
			}
			var sum float64
			for _, nt := range fleet {
				sum += nt.Weight
			}
			for _, nt := range fleet {
				got := 0
				for _, n := range tr.Nodes {
					if len(n.Cards) == nt.Cards && n.Cards[0].Model == nt.Model && n.Cards[0].Capacity == nt.CardGiB && n.CPUMilli == nt.CPUMilli && n.MemoryMiB == nt.MemoryMiB {
						got++
					}
				}
				if want := float64(nodes) * nt.Weight / sum; math.Abs(float64(got)-want) >= 1 {
					t.Errorf("%s at %d nodes: %d nodes of %d × %s %d GiB, want %.2f (±1)", name, nodes, got, nt.Cards, nt.Model, nt.CardGiB, want)
				}
			}
		}
	}
}

// bucketOf is the index of the bucket of mix that pod p was drawn from
// (-1: none could give it).
func bucketOf(mix []Bucket, p replay.PodSpec, maxCard int64, maxCards int) int {
	for i, b := range mix {
		switch {
		case b.WholeCards > 0:
			if p.WholeCards == min(b.WholeCards, maxCards) && p.Units == 0 {
				return i
			}
		case b.MaxGiB > 0:
			if p.WholeCards == 0 && p.Units >= min(b.MinGiB, maxCard) && p.Units <= min(b.MaxGiB, maxCard) {
				return i
			}
		default:
			if p.WholeCards == 0 && p.Units == 0 {
				return i
			}
		}
	}
	return -1
}

// cut is bucket b as Generate draws it on a fleet whose largest card is
// maxCard GiB and largest node has maxCards cards.
func cut(b Bucket, maxCard int64, maxCards int) Bucket {
	if b.WholeCards > 0 {
		return Bucket{WholeCards: min(b.WholeCards, maxCards)}
	}
	return Bucket{MinGiB: min(b.MinGiB, maxCard), MaxGiB: min(b.MaxGiB, maxCard)}
}

func TestRequestMixProportionsAndBounds(t *testing.T) {
	for _, spec := range every(t) {
		tr := generate(t, spec, 1000, 3)
		var maxCard int64
		maxCards := 0
		for _, n := range tr.Nodes {
			maxCard = max(maxCard, n.Cards[0].Capacity)
		}
		big := map[string]bool{}
		for _, n := range tr.Nodes {
			if n.Cards[0].Capacity == maxCard {
				maxCards = max(maxCards, len(n.Cards))
				big[n.Cards[0].Model] = true
			}
		}
		mix := Requests[spec.Requests]
		counts := make([]int, len(mix))
		var asked int64
		for _, p := range tr.Pods {
			if p.Units < 0 || p.Units > maxCard || p.WholeCards > maxCards || (p.Units > 0 && p.Units < 1) {
				t.Fatalf("%s: pod %s asks %d GiB / %d cards; the fleet's largest card is %d GiB, node %d cards", spec, p.Name, p.Units, p.WholeCards, maxCard, maxCards)
			}
			if p.WholeCards > 0 && (len(p.Models) != len(big) || !allIn(p.Models, big)) {
				t.Fatalf("%s: pod %s asks whole cards of %v, want the largest cards' models %v", spec, p.Name, p.Models, big)
			}
			if p.WholeCards == 0 && len(p.Models) > 0 {
				t.Fatalf("%s: pod %s asks a share of %v, want any model", spec, p.Name, p.Models)
			}
			i := bucketOf(mix, p, maxCard, maxCards)
			if i < 0 {
				t.Fatalf("%s: pod %s (%d GiB, %d whole cards) is in no bucket of the mix", spec, p.Name, p.Units, p.WholeCards)
			}
			// Overlapping share buckets are not used by any mix: the first
			// matching bucket is the one drawn.
			counts[i]++
			asked += tr.GPURequest(p)
		}
		if asked < tr.Capacity() || asked-tr.Capacity() > 8*tr.WholeCardUnits {
			t.Errorf("%s: pods ask %d GiB, want the fleet's capacity %d (at most one pod over)", spec, asked, tr.Capacity())
		}
		// A bucket cut to the fleet (8 whole cards on 4-card nodes) is
		// drawn as the bucket it became: its weight goes to that one.
		weight := make([]float64, len(mix))
		var sum float64
		for i, b := range mix {
			sum += b.Weight
			first := i
			for k := range i {
				if cut(mix[k], maxCard, maxCards) == cut(b, maxCard, maxCards) {
					first = k
					break
				}
			}
			weight[first] += b.Weight
		}
		n := float64(len(tr.Pods))
		for i, b := range mix {
			want := weight[i] / sum
			got := float64(counts[i]) / n
			// 4 standard deviations of a binomial share.
			if tol := 4 * math.Sqrt(want*(1-want)/n); math.Abs(got-want) > tol {
				t.Errorf("%s: bucket %+v has %.4f of %d pods, want %.4f ± %.4f", spec, b, got, len(tr.Pods), want, tol)
			}
		}
	}
}

func TestSharesSpreadOverTheWholeBucket(t *testing.T) {
	tr := generate(t, Spec{Fleet: "mixed", Requests: "mixed"}, 2000, 5)
	seen := map[int64]bool{}
	for _, p := range tr.Pods {
		if p.Units > 0 {
			seen[p.Units] = true
		}
	}
	for g := int64(1); g <= 80; g++ {
		if !seen[g] {
			t.Errorf("no pod asks %d GiB: mixed/mixed asks every size from 1 to 80", g)
		}
	}
}

func TestTracesReplay(t *testing.T) {
	p, err := replayPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range every(t) {
		tr := generate(t, spec, 40, 1)
		run := replay.ReplaySampled(tr, p, 1, replay.DefaultInflate, 100)
		// The trace asks for the fleet's capacity: at 100 % arrival most of
		// the fleet is allocated, whatever the mix.
		if u := run.UnallocatedAt100(); u > 50 {
			t.Errorf("%s: %.1f%% unallocated at 100%% arrival (%d pods failed before): the trace does not fill its fleet", spec, u, run.FailedAt100)
		}
		t.Logf("%s: %.1f%% unallocated at 100%% arrival", spec, run.UnallocatedAt100())
	}
}

func TestParseSpec(t *testing.T) {
	if s, err := ParseSpec("training/small"); err != nil || s != (Spec{Fleet: "training", Requests: "small"}) {
		t.Errorf("ParseSpec(training/small) = %+v, %v", s, err)
	}
	for in, want := range map[string]string{
		"mixed":        "want FLEET/REQUESTS",
		"cloud/mixed":  `unknown fleet "cloud" (want one of inference, mixed, training)`,
		"mixed/medium": `unknown request mix "medium" (want one of large, mixed, small)`,
	} {
		if _, err := ParseSpec(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSpec(%q) = %v, want an error saying %q", in, err, want)
		}
	}
	if _, err := Generate(Spec{Fleet: "mixed", Requests: "mixed"}, 0, 1); err == nil {
		t.Error("Generate with 0 nodes: no error")
	}
}

func TestApportion(t *testing.T) {
	for _, c := range []struct {
		w    []float64
		n    int
		want []int
	}{
		{[]float64{0.35, 0.2, 0.3, 0.15}, 10, []int{4, 2, 3, 1}},
		{[]float64{0.35, 0.2, 0.3, 0.15}, 1000, []int{350, 200, 300, 150}},
		{[]float64{1, 1, 1}, 2, []int{1, 1, 0}},
		{[]float64{2, 1}, 1, []int{1, 0}},
	} {
		if diff := cmp.Diff(c.want, Apportion(c.w, c.n)); diff != "" {
			t.Errorf("Apportion(%v, %d) (-want +got):\n%s", c.w, c.n, diff)
		}
	}
}

func replayPolicy() (*allocator.Policy, error) { return registry.Lookup("frag") }

func allIn(models []string, set map[string]bool) bool {
	for _, m := range models {
		if !set[m] {
			return false
		}
	}
	return true
}
