package replay

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"k8s.io/utils/ptr"
)

// Summary is the mean over seeds of one trace × policy.
type Summary struct {
	Trace  string `json:"trace"`
	Policy string `json:"policy"`
	Seeds  int    `json:"seeds"`
	// AllocatedAt maps an arrival level of ReportAt ("90", …, "130") to the
	// mean allocated share, % of capacity.
	AllocatedAt      map[string]float64 `json:"allocated_at"`
	UnallocatedAt100 float64            `json:"unallocated_at_100"`
	FailedPods       float64            `json:"failed_pods"`
	FailedAt100      float64            `json:"failed_pods_at_100"`
	// Curve is the mean allocation curve (see Run.Curve).
	Curve []float64 `json:"curve"`
}

// Report is the outcome of a batch of replays.
type Report struct {
	Runs      []Run     `json:"runs"`
	Summaries []Summary `json:"summaries"`
}

// Batch is a set of replays: every workload × policy × seed.
type Batch struct {
	Traces   []*Trace
	Policies []*allocator.Policy
	Seeds    []int64
	Inflate  float64
	// NodesToScore is kube-scheduler's percentageOfNodesToScore to model
	// (ReplaySampled): 100 (or unset) every node, 0 its adaptive default.
	NodesToScore *int
	// WorkloadTolerance is how far the workload the policies read may lag
	// (ReplayModel; nil: allocator.WorkloadTolerance, the extender's).
	WorkloadTolerance *float64
	// Parallel is how many replays run at once (at least 1).
	Parallel int
	// Progress, when not nil, gets one line per finished replay.
	Progress io.Writer
}

// Run replays the batch. Runs and summaries come out in the order of
// Traces, then Policies, then Seeds, whatever the parallelism.
func (b Batch) Run(ctx context.Context) (*Report, error) {
	type job struct{ t, p, s int }
	var jobs []job
	for t := range b.Traces {
		for p := range b.Policies {
			for s := range b.Seeds {
				jobs = append(jobs, job{t, p, s})
			}
		}
	}
	runs := make([]Run, len(jobs))
	par := max(b.Parallel, 1)
	inflate := b.Inflate
	if inflate <= 0 {
		inflate = DefaultInflate
	}
	percent, tol := ptr.Deref(b.NodesToScore, 100), ptr.Deref(b.WorkloadTolerance, allocator.WorkloadTolerance)
	var mu sync.Mutex
	err := parallel(ctx, len(jobs), par, func(k int) {
		j := jobs[k]
		r := ReplayModel(b.Traces[j.t], b.Policies[j.p], b.Seeds[j.s], inflate, percent, tol)
		runs[k] = r
		if b.Progress != nil {
			mu.Lock()
			fmt.Fprintf(b.Progress, "%-28s %-10s seed %-3d unallocated@100 %6.2f%%  failed %d\n", r.Trace, r.Policy, r.Seed, r.UnallocatedAt100(), r.Failed)
			mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{Runs: runs}
	for i := 0; i < len(runs); i += len(b.Seeds) {
		rep.Summaries = append(rep.Summaries, Summarize(runs[i:i+len(b.Seeds)]))
	}
	return rep, nil
}

// parallel calls do(i) for each i below n, in order, on par goroutines
// (do's calls may run at once), until ctx ends; it returns ctx's error.
func parallel(ctx context.Context, n, par int, do func(i int)) error {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range max(par, 1) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				do(i)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// Summarize averages runs of one trace × policy.
func Summarize(runs []Run) Summary {
	s := Summary{AllocatedAt: map[string]float64{}, Curve: make([]float64, CurveSteps), Seeds: len(runs)}
	if len(runs) == 0 {
		return s
	}
	s.Trace, s.Policy = runs[0].Trace, runs[0].Policy
	n := float64(len(runs))
	for _, r := range runs {
		for k := range s.Curve {
			s.Curve[k] += r.AllocatedAt(k) / n
		}
		s.FailedPods += float64(r.Failed) / n
		s.FailedAt100 += float64(r.FailedAt100) / n
	}
	for _, pct := range ReportAt {
		s.AllocatedAt[strconv.Itoa(pct)] = s.Curve[pct]
	}
	s.UnallocatedAt100 = 100 - s.Curve[100]
	return s
}

// AnchorRow is one line of fgd_anchor_unallocated.csv: the FGD paper's
// result for one workload and policy, mean of its seeds.
type AnchorRow struct {
	Workload string
	Policy   string
	// AllocatedAt is at ReportAt's levels.
	AllocatedAt      []float64
	UnallocatedAt100 float64
}

// ReadAnchor reads fgd_anchor_unallocated.csv.
func ReadAnchor(path string) ([]AnchorRow, error) {
	t, err := readTableFile(path, "workload", "policy", "unalloc_at_100")
	if err != nil {
		return nil, err
	}
	var out []AnchorRow
	for k, row := range t.rows {
		a := AnchorRow{Workload: t.str(row, "workload"), Policy: t.str(row, "policy")}
		for _, pct := range ReportAt {
			v, err := strconv.ParseFloat(t.str(row, "alloc_at_"+strconv.Itoa(pct)), 64)
			if err != nil {
				return nil, fmt.Errorf("%s: line %d: alloc_at_%d: %w", path, k+2, pct, err)
			}
			a.AllocatedAt = append(a.AllocatedAt, v)
		}
		if a.UnallocatedAt100, err = strconv.ParseFloat(t.str(row, "unalloc_at_100"), 64); err != nil {
			return nil, fmt.Errorf("%s: line %d: unalloc_at_100: %w", path, k+2, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// AnchorWorkloads lists the workloads of the anchor, sorted.
func AnchorWorkloads(rows []AnchorRow) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rows {
		if !seen[r.Workload] {
			seen[r.Workload] = true
			out = append(out, r.Workload)
		}
	}
	sort.Strings(out)
	return out
}

// WriteTable prints, per trace, our policies' means beside the anchor's
// policies for the same workload; with perRun, every run too.
func WriteTable(w io.Writer, rep *Report, anchor []AnchorRow, perRun bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "policy\t"
	for _, pct := range ReportAt {
		header += fmt.Sprintf("@%d%%\t", pct)
	}
	header += "unalloc@100\tfailed pods\t"
	traces := []string{}
	byTrace := map[string][]Summary{}
	for _, s := range rep.Summaries {
		if _, ok := byTrace[s.Trace]; !ok {
			traces = append(traces, s.Trace)
		}
		byTrace[s.Trace] = append(byTrace[s.Trace], s)
	}
	for _, tr := range traces {
		fmt.Fprintf(w, "%s — allocated %% of GPU capacity at arrived %% (mean of %d seeds)\n", tr, byTrace[tr][0].Seeds)
		fmt.Fprintln(tw, header)
		for _, s := range byTrace[tr] {
			line := s.Policy + "\t"
			for _, pct := range ReportAt {
				line += fmt.Sprintf("%.2f\t", s.AllocatedAt[strconv.Itoa(pct)])
			}
			line += fmt.Sprintf("%.2f\t%.1f\t", s.UnallocatedAt100, s.FailedPods)
			fmt.Fprintln(tw, line)
		}
		for _, a := range anchor {
			if a.Workload != tr {
				continue
			}
			line := "anchor " + a.Policy + "\t"
			for _, v := range a.AllocatedAt {
				line += fmt.Sprintf("%.2f\t", v)
			}
			line += fmt.Sprintf("%.2f\t-\t", a.UnallocatedAt100)
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if perRun {
		fmt.Fprintln(tw, "trace\tpolicy\tseed\tpods\t"+strings.TrimPrefix(header, "policy\t"))
		for _, r := range rep.Runs {
			line := fmt.Sprintf("%s\t%s\t%d\t%d\t", r.Trace, r.Policy, r.Seed, r.Pods)
			for _, pct := range ReportAt {
				line += fmt.Sprintf("%.2f\t", r.AllocatedAt(pct))
			}
			line += fmt.Sprintf("%.2f\t%d\t", r.UnallocatedAt100(), r.Failed)
			fmt.Fprintln(tw, line)
		}
	}
	return tw.Flush()
}

// WriteMatrix prints unallocated@100 per workload: our policies as columns,
// then the anchor's FGD and BestFit, and whether our best fragmentation
// policy (frag) is at or below the anchor's FGD.
func WriteMatrix(w io.Writer, rep *Report, anchor []AnchorRow) error {
	var traces, policies []string
	val := map[[2]string]float64{}
	for _, s := range rep.Summaries {
		if !contains(traces, s.Trace) {
			traces = append(traces, s.Trace)
		}
		if !contains(policies, s.Policy) {
			policies = append(policies, s.Policy)
		}
		val[[2]string{s.Trace, s.Policy}] = s.UnallocatedAt100
	}
	anchorOf := func(tr, pol string) (float64, bool) {
		for _, a := range anchor {
			if a.Workload == tr && strings.HasSuffix(a.Policy, pol) {
				return a.UnallocatedAt100, true
			}
		}
		return 0, false
	}
	fmt.Fprintln(w, "unallocated % of GPU capacity at 100% arrival (mean of seeds)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\t"+strings.Join(policies, "\t")+"\tanchor BestFit\tanchor FGD\t")
	for _, tr := range traces {
		line := strings.TrimPrefix(tr, "openb_pod_list_") + "\t"
		for _, p := range policies {
			line += fmt.Sprintf("%.2f\t", val[[2]string{tr, p}])
		}
		for _, ap := range []string{"BestFit", "FGD"} {
			if v, ok := anchorOf(tr, ap); ok {
				line += fmt.Sprintf("%.2f\t", v)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
