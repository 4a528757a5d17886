package burstbench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gpushare/gpushare/api"
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

// Judge says whether a suite meets the target: (a) every pod of every burst
// Ready, (b) the GPU pods' p90 create → Ready alone at most Target times the
// p90 of pods without a request alone, (c) in the mixed burst, both kinds'
// p90 at most Target times that same figure. The baseline is the node's own
// pace for pods without a request: a slower baseline in the mixed burst
// (pods waiting behind GPU pods) does not excuse the GPU pods. why says what
// failed, one line each.
func Judge(results []Result) (met bool, why []string) {
	by := map[Mix]Result{}
	for _, r := range results {
		by[r.Mix] = r
	}
	for _, m := range []Mix{PlainOnly, GPUOnly, Interleaved} {
		r, ok := by[m]
		if !ok {
			why = append(why, fmt.Sprintf("%s: not run", m))
			continue
		}
		if r.Err != nil {
			why = append(why, fmt.Sprintf("%s: %v", m, r.Err))
		}
		for _, k := range []string{Plain, GPU} {
			if s, ok := r.Stats[k]; ok && s.Ready < s.Pods {
				why = append(why, fmt.Sprintf("%s: %d of %d %s pods Ready (%d Failed)", m, s.Ready, s.Pods, k, s.Failed))
			}
		}
	}
	base := by[PlainOnly].Stats[Plain].CreateToReady.P90
	if base == 0 {
		return false, append(why, "no baseline: no pod without a request Ready in its own burst")
	}
	check := func(m Mix, kind string) {
		p90 := by[m].Stats[kind].CreateToReady.P90
		if p90 == 0 {
			return // reported above (or not run)
		}
		if r := float64(p90) / float64(base); r > Target {
			why = append(why, fmt.Sprintf("%s: %s p90 %s is %.2f× the no-GPU-alone p90 %s (target ≤ %.1f×)", m, kind, sec(p90), r, sec(base), Target))
		}
	}
	check(GPUOnly, GPU)
	check(Interleaved, GPU)
	check(Interleaved, Plain)
	return len(why) == 0, why
}

// WriteSuite prints each burst's table, each figure's multiple of the
// no-GPU-alone p90 and the verdict (Judge).
func WriteSuite(w io.Writer, o Options, results []Result) bool {
	fmt.Fprintf(w, "\ngpushare burst: %d pods per burst, the mixed one half of each kind (GPU pods %d GiB), created at once by %d clients; three bursts, one after the other\n\n", o.Pods, o.GiB, o.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "burst\tpods\tReady\tFailed\tcreate→bound p90\tbound→Ready p90\tcreate→Ready p50\tp90\tmax\tfirst create→last Ready\t÷ base p90\t")
	var base time.Duration
	for _, r := range results {
		if r.Mix == PlainOnly {
			base = r.Stats[Plain].CreateToReady.P90
		}
	}
	for _, r := range results {
		for _, k := range []string{Plain, GPU, Floor} {
			s, ok := r.Stats[k]
			if !ok {
				continue
			}
			ratio := "-"
			if base > 0 && s.CreateToReady.P90 > 0 {
				ratio = fmt.Sprintf("%.2f", float64(s.CreateToReady.P90)/float64(base))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Mix, kindName(k, o.GiB), s.Ready, s.Pods, s.Failed,
				sec(s.CreateToBound.P90), sec(s.BoundToReady.P90), sec(s.CreateToReady.P50), sec(s.CreateToReady.P90), sec(s.CreateToReady.Max), sec(s.Span), ratio)
		}
	}
	_ = tw.Flush()
	writeNodePaces(w, o, results)
	writeFloor(w, o, results)
	met, why := Judge(results)
	if n, of := recorded(results); n > 0 {
		// Both kinds pay the extra write, so it flatters the ratio.
		met, why = false, append(why, fmt.Sprintf("not judged: %d of %d pods carry the node agents' container records (%s), one API write per pod that a kubelet does not make; measure on `make playground CONTAINER_RECORDS=0`",
			n, of, api.DefaultNames().AnnotationSimulatedContainers()))
	}
	if met {
		fmt.Fprintf(w, "\ntarget (every pod Ready; GPU alone and both kinds mixed p90 ≤ %.1f× the no-GPU-alone p90 %s): met\n", Target, sec(base))
		return true
	}
	fmt.Fprintf(w, "\ntarget (every pod Ready; GPU alone and both kinds mixed p90 ≤ %.1f× the no-GPU-alone p90): not met\n", Target)
	for _, l := range why {
		fmt.Fprintf(w, "  %s\n", l)
	}
	return false
}

// writeFloor compares the GPU pods with the device floor: pods asking as
// much of a do-nothing device plugin through the default scheduler, the
// part of a GPU pod's time that is the kubelet's and the scheduler's.
func writeFloor(w io.Writer, o Options, results []Result) {
	var floor time.Duration
	for _, r := range results {
		if r.Mix == DeviceFloor {
			floor = r.Stats[Floor].CreateToReady.P90
		}
	}
	if floor == 0 {
		return
	}
	what := o.FloorWhat
	if what == "" {
		what = fmt.Sprintf("%d %s of a device plugin that does nothing", o.GiB, o.FloorResource)
	}
	fmt.Fprintf(w, "\ndevice floor (not judged): pods asking %s, default scheduler: p90 %s\n", what, sec(floor))
	for _, r := range results {
		for _, k := range []string{GPU, Plain} {
			if p90 := r.Stats[k].CreateToReady.P90; p90 > 0 && r.Mix != PlainOnly {
				fmt.Fprintf(w, "  %s, %s p90: %.2f× the floor\n", r.Mix, k, float64(p90)/float64(floor))
			}
		}
	}
}

// recorded counts the pods that carried the node agent's container records.
func recorded(results []Result) (n, of int) {
	for _, r := range results {
		for _, t := range r.Pods {
			if of++; t.Recorded {
				n++
			}
		}
	}
	return n, of
}

// NodePace is one node's share of one kind in a burst: how many pods were
// bound to it, their bound → Ready p90, and how many it turned Ready per
// second from its first bound pod to its last Ready one (its admission
// pace: the kubelet admits a node's pods one at a time).
type NodePace struct {
	Node, Kind   string
	Pods         int
	BoundToReady time.Duration
	PerSecond    float64
}

// NodePaces are the burst's figures per node and kind, by node name.
func NodePaces(pods map[string]*Timeline) []NodePace {
	type key struct{ node, kind string }
	type acc struct {
		run         []time.Duration
		first, last time.Time
	}
	by := map[key]*acc{}
	for _, t := range pods {
		if t.Node == "" || t.Ready.IsZero() {
			continue
		}
		k := key{t.Node, t.Kind}
		a := by[k]
		if a == nil {
			a = &acc{first: t.Bound}
			by[k] = a
		}
		a.run = append(a.run, t.Ready.Sub(t.Bound))
		if t.Bound.Before(a.first) {
			a.first = t.Bound
		}
		if t.Ready.After(a.last) {
			a.last = t.Ready
		}
	}
	var out []NodePace
	for k, a := range by {
		np := NodePace{Node: k.node, Kind: k.kind, Pods: len(a.run), BoundToReady: percentiles(a.run).P90}
		if span := a.last.Sub(a.first); span > 0 {
			np.PerSecond = float64(len(a.run)) / span.Seconds()
		}
		out = append(out, np)
	}
	slices.SortFunc(out, func(x, y NodePace) int { return cmp.Or(cmp.Compare(x.Node, y.Node), cmp.Compare(x.Kind, y.Kind)) })
	return out
}

// writeNodePaces prints each burst's NodePaces.
func writeNodePaces(w io.Writer, o Options, results []Result) {
	fmt.Fprintf(w, "\nper node (the kubelet admits a node's pods one at a time): pods bound there, bound → Ready p90, pods Ready per second from its first bound to its last Ready\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "burst\tnode\tkind\tpods\tbound→Ready p90\tpods/s\t")
	for _, r := range results {
		for _, np := range NodePaces(r.Pods) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.0f\t\n", r.Mix, np.Node, kindName(np.Kind, o.GiB), np.Pods, sec(np.BoundToReady), np.PerSecond)
		}
	}
	_ = tw.Flush()
}

func kindName(k string, gib int64) string {
	if k == GPU || k == Floor {
		return fmt.Sprintf("%s %d GiB", k, gib)
	}
	return k
}

func sec(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
