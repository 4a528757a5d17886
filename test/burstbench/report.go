package burstbench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Target is the most the GPU pods' p90 create → Ready may be, as a multiple
// of the p90 of the pods without a GPU request in the same burst.
const Target = 1.2

// Stats are one kind's figures.
type Stats struct {
	Kind          string
	Pods, Ready   int
	Failed        int
	CreateToBound Percentiles
	BoundToReady  Percentiles
	CreateToReady Percentiles
	// Span is first creation → last Ready of the kind.
	Span time.Duration
}

// Percentiles of durations (nearest rank); N is how many there were.
type Percentiles struct {
	N             int
	P50, P90, Max time.Duration
}

// percentiles of ds (nearest rank: the smallest value with at least p % of
// the values at or below it).
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p int) time.Duration { return s[max((p*len(s)+99)/100, 1)-1] }
	return Percentiles{N: len(s), P50: rank(50), P90: rank(90), Max: s[len(s)-1]}
}

// Summarize computes each kind's figures from the timelines.
func Summarize(pods map[string]*Timeline) map[string]Stats {
	type acc struct {
		bound, run, total []time.Duration
		first, last       time.Time
		s                 Stats
	}
	by := map[string]*acc{}
	for _, t := range pods {
		a := by[t.Kind]
		if a == nil {
			a = &acc{s: Stats{Kind: t.Kind}}
			by[t.Kind] = a
		}
		a.s.Pods++
		if t.Failed {
			a.s.Failed++
		}
		if t.Created.IsZero() {
			continue
		}
		if a.first.IsZero() || t.Created.Before(a.first) {
			a.first = t.Created
		}
		if !t.Bound.IsZero() {
			a.bound = append(a.bound, t.Bound.Sub(t.Created))
		}
		if !t.Ready.IsZero() {
			a.s.Ready++
			a.total = append(a.total, t.Ready.Sub(t.Created))
			if !t.Bound.IsZero() {
				a.run = append(a.run, t.Ready.Sub(t.Bound))
			}
			if t.Ready.After(a.last) {
				a.last = t.Ready
			}
		}
	}
	out := map[string]Stats{}
	for k, a := range by {
		a.s.CreateToBound, a.s.BoundToReady, a.s.CreateToReady = percentiles(a.bound), percentiles(a.run), percentiles(a.total)
		if !a.last.IsZero() {
			a.s.Span = a.last.Sub(a.first)
		}
		out[k] = a.s
	}
	return out
}

// Ratio is the GPU pods' p90 create → Ready over the others' (0 when
// either kind has none Ready).
func Ratio(stats map[string]Stats) float64 {
	g, p := stats[GPU].CreateToReady.P90, stats[Plain].CreateToReady.P90
	if g == 0 || p == 0 {
		return 0
	}
	return float64(g) / float64(p)
}

// WriteReport prints the table, the ratio and whether the target is met.
func WriteReport(w io.Writer, o Options, stats map[string]Stats) {
	fmt.Fprintf(w, "\ngpushare burst: %d pods without a GPU request and %d of %d GiB, interleaved, created at once by %d clients\n\n", o.Pods, o.Pods, o.GiB, o.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pods\tReady\tFailed\tcreate→bound p50\tp90\tbound→Ready p50\tp90\tcreate→Ready p50\tp90\tmax\tfirst create→last Ready\t")
	for _, k := range []string{Plain, GPU} {
		s := stats[k]
		name := k
		if k == GPU {
			name = fmt.Sprintf("%s %d GiB", k, o.GiB)
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, s.Ready, s.Pods, s.Failed,
			sec(s.CreateToBound.P50), sec(s.CreateToBound.P90), sec(s.BoundToReady.P50), sec(s.BoundToReady.P90),
			sec(s.CreateToReady.P50), sec(s.CreateToReady.P90), sec(s.CreateToReady.Max), sec(s.Span))
	}
	_ = tw.Flush()
	r := Ratio(stats)
	if r == 0 {
		fmt.Fprintf(w, "\nGPU p90 ÷ no-GPU p90 (create→Ready): - (a kind has no Ready pod)\n")
		return
	}
	verdict := "met"
	if r > Target {
		verdict = "not met"
	}
	fmt.Fprintf(w, "\nGPU p90 ÷ no-GPU p90 (create→Ready): %.3f (target ≤ %.1f: %s)\n", r, Target, verdict)
}

func sec(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
