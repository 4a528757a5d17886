package replay

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// Each point is the mean over seeds of the setting's unallocated share
// minus every node's on the same seed's workload, and every node is
// replayed even when not asked for.
func TestSamplingCurveIsThePairedDifferenceWithEveryNode(t *testing.T) {
	frag, err := registry.Lookup("frag")
	if err != nil {
		t.Fatal(err)
	}
	tiny := tinyTrace(t)
	made := map[[2]int64]int{}
	mk := func(nodes int, seed int64) (*Trace, error) {
		made[[2]int64{int64(nodes), seed}]++
		return tiny.Scaled(nodes / len(tiny.Nodes)), nil
	}
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	seeds := []int64{1, 2, 3}
	c := SamplingCurve{Sizes: []int{150, 300}, Percents: []int{0, 10}, Seeds: seeds, Policy: frag, Make: mk, Parallel: 1, Now: now}
	points, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 6 {
		t.Fatalf("%d points, want 2 sizes × (0, 10 and 100)", len(points))
	}
	for k, v := range made {
		if v != 1 {
			t.Errorf("workload %v made %d times, want once per size and seed", k, v)
		}
	}
	for i, p := range points {
		n, percent := []int{150, 300}[i/3], []int{0, 10, 100}[i%3]
		if p.Nodes != n || p.Percent != percent || p.Searched != NodesToFind(percent, n) || p.Seeds != 3 {
			t.Fatalf("point %d = %+v, want %d nodes, setting %d", i, p, n, percent)
		}
		var costs []float64
		var pods float64
		for _, s := range seeds {
			tr := tiny.Scaled(n / len(tiny.Nodes))
			r := ReplaySampled(tr, frag, s, DefaultInflate, percent)
			all := ReplaySampled(tr, frag, s, DefaultInflate, 100)
			costs = append(costs, r.UnallocatedAt100()-all.UnallocatedAt100())
			pods += float64(r.Pods) / 3
		}
		mean, sd := meanSD(costs)
		if math.Abs(p.Cost-mean) > 1e-9 || math.Abs(p.CostSD-sd) > 1e-9 {
			t.Errorf("%d nodes, setting %d: cost %.4f ± %.4f, want %.4f ± %.4f (%v)", n, percent, p.Cost, p.CostSD, mean, sd, costs)
		}
		// The fake clock moves 1 s per reading: a replay takes 1 s.
		if math.Abs(p.PodsPerSecond-pods) > 1e-9 {
			t.Errorf("%d nodes, setting %d: %.1f pods/s, want %.1f (pods per 1 s replay)", n, percent, p.PodsPerSecond, pods)
		}
		if percent == 100 && (p.Cost != 0 || p.CostSD != 0) {
			t.Errorf("every node costs %+v against itself", p)
		}
	}
	var out bytes.Buffer
	if err := WriteCurve(&out, "tiny", points); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "0 (adaptive)") || strings.Count(out.String(), "\n") != 8 {
		t.Errorf("table:\n%s\nwant a title, a header and 6 lines, the adaptive setting named", out.String())
	}
}

func TestMeanSD(t *testing.T) {
	if m, sd := meanSD([]float64{1, 2, 3, 4}); m != 2.5 || math.Abs(sd-math.Sqrt(5.0/3)) > 1e-12 {
		t.Errorf("meanSD(1..4) = %v, %v; want 2.5, %v", m, sd, math.Sqrt(5.0/3))
	}
	if m, sd := meanSD([]float64{-0.5}); m != -0.5 || sd != 0 {
		t.Errorf("meanSD(-0.5) = %v, %v; want -0.5, 0", m, sd)
	}
}

func TestSamplingCurveRefusesBadSettings(t *testing.T) {
	frag, _ := registry.Lookup("frag")
	mk := func(int, int64) (*Trace, error) { return tinyTrace(t), nil }
	for _, c := range []SamplingCurve{
		{Sizes: []int{1}, Percents: []int{101}, Seeds: []int64{1}, Policy: frag, Make: mk, Now: time.Now},
		{Sizes: []int{1}, Percents: []int{0}, Seeds: nil, Policy: frag, Make: mk, Now: time.Now},
		{Sizes: []int{1}, Percents: []int{0}, Seeds: []int64{1}, Policy: frag, Now: time.Now},
	} {
		if _, err := c.Run(context.Background()); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// gpushare-simulate -curve: the generated workload's curve, as a table.
func TestMainPrintsTheCurveOfAGeneratedWorkload(t *testing.T) {
	tiny := tinyTrace(t)
	mk := func(nodes int, seed int64) (*Trace, error) { return tiny.Scaled(nodes / len(tiny.Nodes)), nil }
	var out bytes.Buffer
	o := Options{Generate: mk, Nodes: []int{150}, Curve: []int{0, 50}, Policies: []string{"frag"}, FirstSeed: 1, Seeds: 2, Output: "table", Parallel: 2, Stdout: &out}
	if err := Main(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tiny_x150, frag, seeds 1-2", "0 (adaptive)", "   50  ", "  100  "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	o.Generate = nil
	if err := Main(context.Background(), o); err == nil || !strings.Contains(err.Error(), "-synthetic") {
		t.Errorf("-curve without a generated workload: %v, want an error naming -synthetic", err)
	}
}
