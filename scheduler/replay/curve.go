package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// SamplingCurve measures what kube-scheduler's percentageOfNodesToScore
// costs a policy in packing, and what it saves in time, at several cluster
// sizes: for each size and seed one workload (Make), replayed once per
// setting (ReplaySampled) and once with every node (percent 100), and the
// unallocated share at 100 % arrival of each setting compared with every
// node's on the same workload and arrival order (a paired difference).
type SamplingCurve struct {
	Sizes    []int
	Percents []int
	Seeds    []int64
	Policy   *allocator.Policy
	Inflate  float64
	// Make is the workload of nodes nodes for seed (e.g. synth.Generate).
	Make func(nodes int, seed int64) (*Trace, error)
	// Parallel is how many replays run at once (at least 1); rates are
	// per replay, so more than the machine's cores lowers them.
	Parallel int
	// Now times each replay (time.Now; a fake in tests).
	Now func() time.Time
	// Progress, when not nil, gets one line per finished replay.
	Progress io.Writer
}

// CurvePoint is one size × setting of a SamplingCurve, over its seeds.
type CurvePoint struct {
	Nodes   int `json:"nodes"`
	Percent int `json:"percent"`
	// Searched is how many feasible nodes kube-scheduler looks for per pod
	// (NodesToFind).
	Searched int `json:"searched"`
	Seeds    int `json:"seeds"`
	// Unallocated is the mean unallocated % of GPU capacity at 100 %
	// arrival; Cost, CostSD, CostMin and CostMax are the mean, sample
	// standard deviation (0 for one seed), least and largest over seeds of
	// Unallocated minus every node's on the same seed, in points.
	Unallocated float64 `json:"unallocated_at_100"`
	Cost        float64 `json:"cost"`
	CostSD      float64 `json:"cost_sd"`
	CostMin     float64 `json:"cost_min"`
	CostMax     float64 `json:"cost_max"`
	// PodsPerSecond is the mean over seeds of pods placed or failed per
	// second of one replay: the policy's evaluation of the searched nodes
	// and kube-scheduler's fit, on one core.
	PodsPerSecond float64 `json:"pods_per_second"`
}

// Run replays the curve; points come out by size, then setting in the
// order of Percents (100 is replayed whether listed or not).
func (c SamplingCurve) Run(ctx context.Context) ([]CurvePoint, error) {
	if c.Make == nil || c.Policy == nil || c.Now == nil {
		return nil, fmt.Errorf("sampling curve: Make, Policy and Now are required")
	}
	if len(c.Sizes) == 0 || len(c.Percents) == 0 || len(c.Seeds) == 0 {
		return nil, fmt.Errorf("sampling curve: want at least one size, setting and seed")
	}
	for _, p := range c.Percents {
		if p < 0 || p > 100 {
			return nil, fmt.Errorf("percentageOfNodesToScore %d: want 0 (kube-scheduler's adaptive sample) to 100", p)
		}
	}
	percents := slices.Clone(c.Percents)
	if !slices.Contains(percents, 100) {
		percents = append(percents, 100)
	}
	type job struct {
		t          *Trace
		size, seed int // indexes
		percent    int
	}
	var jobs []job
	for si, n := range c.Sizes {
		for ki, seed := range c.Seeds {
			t, err := c.Make(n, seed)
			if err != nil {
				return nil, err
			}
			for _, p := range percents {
				jobs = append(jobs, job{t, si, ki, p})
			}
		}
	}
	// Slowest first (every node, largest cluster), so that the parallel
	// replays end together.
	slices.SortStableFunc(jobs, func(a, b job) int {
		return NodesToFind(b.percent, len(b.t.Nodes))*len(b.t.Pods) - NodesToFind(a.percent, len(a.t.Nodes))*len(a.t.Pods)
	})
	inflate := c.Inflate
	if inflate <= 0 {
		inflate = DefaultInflate
	}
	type result struct{ unalloc, rate float64 }
	results := map[[3]int]result{} // size, seed, percent
	var mu sync.Mutex
	err := parallel(ctx, len(jobs), c.Parallel, func(k int) {
		j := jobs[k]
		start := c.Now()
		r := ReplaySampled(j.t, c.Policy, c.Seeds[j.seed], inflate, j.percent)
		secs := c.Now().Sub(start).Seconds()
		res := result{unalloc: r.UnallocatedAt100()}
		if secs > 0 {
			res.rate = float64(r.Pods) / secs
		}
		mu.Lock()
		defer mu.Unlock()
		results[[3]int{j.size, j.seed, j.percent}] = res
		if c.Progress != nil {
			fmt.Fprintf(c.Progress, "%6d nodes  percentageOfNodesToScore %3d  seed %-3d unallocated@100 %6.2f%%  %8.0f pods/s\n", len(j.t.Nodes), j.percent, c.Seeds[j.seed], res.unalloc, res.rate)
		}
	})
	if err != nil {
		return nil, err
	}
	var out []CurvePoint
	for si, n := range c.Sizes {
		for _, p := range percents {
			pt := CurvePoint{Nodes: n, Percent: p, Searched: NodesToFind(p, n), Seeds: len(c.Seeds)}
			costs := make([]float64, len(c.Seeds))
			for ki := range c.Seeds {
				r, all := results[[3]int{si, ki, p}], results[[3]int{si, ki, 100}]
				costs[ki] = r.unalloc - all.unalloc
				pt.Unallocated += r.unalloc / float64(len(c.Seeds))
				pt.PodsPerSecond += r.rate / float64(len(c.Seeds))
			}
			pt.Cost, pt.CostSD = meanSD(costs)
			pt.CostMin, pt.CostMax = slices.Min(costs), slices.Max(costs)
			out = append(out, pt)
		}
	}
	return out, nil
}

// meanSD is the mean and the sample standard deviation (n − 1; 0 for one
// value) of v.
func meanSD(v []float64) (mean, sd float64) {
	for _, x := range v {
		mean += x / float64(len(v))
	}
	if len(v) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(v)-1))
}

// WriteCurve prints the points as a table, one line per size × setting.
func WriteCurve(w io.Writer, name string, points []CurvePoint) error {
	fmt.Fprintf(w, "%s: unallocated %% of GPU capacity at 100%% arrival; cost = that minus every node's on the same seed, points\n", name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tpercentageOfNodesToScore\tsearched\tseeds\tunalloc@100\tcost mean\tcost sd\tcost min..max\tpods/s\t")
	for _, p := range points {
		setting := fmt.Sprint(p.Percent)
		if p.Percent == 0 {
			setting = "0 (adaptive)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.2f\t%+.3f\t%.3f\t%+.2f..%+.2f\t%.0f\t\n", p.Nodes, setting, p.Searched, p.Seeds, p.Unallocated, p.Cost, p.CostSD, p.CostMin, p.CostMax, p.PodsPerSecond)
	}
	return tw.Flush()
}
