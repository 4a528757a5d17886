package schedbench

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpushare/gpushare/test/cluster"
)

// printReport writes the benchmark's tables: throughput per run (with the
// ratio to kube-scheduler alone), the extender's latencies and bind outcomes,
// CPU seconds, and what the checks found.
func printReport(w io.Writer, o Options, b *Bench, results []Result) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "\ngpushare scheduling benchmark: %d nodes × %d cards × %d GiB (API objects), %d pods × %d GiB created by %d clients, timeout %v per run\n",
		o.Nodes, o.Cards, o.CardGiB, o.Pods, o.PodGiB, o.Clients, o.Timeout)
	fmt.Fprintf(w, "control plane %s on 127.0.0.1 (up in %v), nodes created in %v; %d CPUs, load average %s\n",
		cluster.K8sVersion(), b.ClusterIn.Round(time.Millisecond), b.NodesIn.Round(time.Millisecond), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Fprintf(w, "(a) kube-scheduler alone (its defaults, and then scoring every node if listed as %s), pods ask example.com/gpu-mem as an extended resource; (b) kube-scheduler with %s and the gpushare extender, one run per policy\n\n", PlainAllNodes, o.SchedulerConfig)

	var plain, allNodes float64
	before := map[string]float64{}
	for _, r := range results {
		switch {
		case r.Name == PlainAllNodes:
			allNodes = r.Throughput.Overall
		case r.Policy == "":
			plain = r.Throughput.Overall
		case r.Name == r.Policy+BaselineSuffix:
			before[r.Policy] = r.Throughput.Overall
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "run\tbound\tcreated in\tlast bind at\toverall pods/s\tsteady pods/s\t÷ plain"
	if allNodes > 0 {
		head += "\t÷ plain all nodes"
	}
	if len(before) > 0 {
		head += "\t÷ before"
	}
	for _, m := range ProgressMarks {
		head += fmt.Sprintf("\tby %v", m)
	}
	fmt.Fprintln(tw, head+"\tcheck\t")
	for _, r := range results {
		ratio := "-"
		if (r.Policy != "" || r.Name == PlainAllNodes) && plain > 0 {
			ratio = fmt.Sprintf("%.2f", r.Throughput.Overall/plain)
		}
		line := fmt.Sprintf("%s\t%d/%d\t%s\t%s\t%s\t%s\t%s", label(r), r.Throughput.Bound, r.Throughput.Want,
			dur(r.Created), dur(r.Throughput.Elapsed), rate(r.Throughput.Overall), rate(r.Throughput.Steady), ratio)
		if allNodes > 0 {
			if r.Policy != "" {
				line += fmt.Sprintf("\t%.2f", r.Throughput.Overall/allNodes)
			} else {
				line += "\t-"
			}
		}
		if len(before) > 0 {
			if v := before[r.Policy]; v > 0 && r.Name == r.Policy {
				line += fmt.Sprintf("\t%.2f", r.Throughput.Overall/v)
			} else {
				line += "\t-"
			}
		}
		for _, n := range r.Progress {
			line += fmt.Sprintf("\t%d", n)
		}
		for range len(ProgressMarks) - len(r.Progress) {
			line += "\t-"
		}
		fmt.Fprintln(tw, line+"\t"+checkWord(r)+"\t")
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nextender latency from its /metrics (ms; percentiles interpolated in the histogram's buckets; ≥: beyond its largest bucket), bind outcomes, node decisions (evaluated by the policy, or from the memo)\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head = "policy"
	for _, v := range Verbs {
		head += fmt.Sprintf("\t%s n\tp50\tp90\tp99", v)
	}
	fmt.Fprintln(tw, head+"\tbinds by outcome\tnode decisions by source\t")
	for _, r := range results {
		if r.Policy == "" {
			continue
		}
		line := r.Name
		for _, v := range Verbs {
			l, ok := r.Latency[v]
			if !ok {
				line += "\t-\t-\t-\t-"
				continue
			}
			line += fmt.Sprintf("\t%d\t%s\t%s\t%s", l.Count, msAtMost(l.P50, l.Top), msAtMost(l.P90, l.Top), msAtMost(l.P99, l.Top))
		}
		fmt.Fprintln(tw, line+"\t"+outcomes(r.Binds)+"\t"+outcomes(r.Decisions)+"\t")
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nCPU seconds during each run (first creation to last bind, or to the timeout), from /proc/PID/stat; the extender's peak resident memory over its run (VmHWM, /proc/PID/status)\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\t"+strings.Join(CPUComponents, "\t")+"\textender peak RSS\t")
	for _, r := range results {
		line := label(r)
		for _, c := range CPUComponents {
			if v, ok := r.CPU[c]; ok {
				line += fmt.Sprintf("\t%.1f", v)
			} else {
				line += "\t-"
			}
		}
		if r.ExtenderPeakRSS > 0 {
			line += fmt.Sprintf("\t%.0f MiB", float64(r.ExtenderPeakRSS)/(1<<20))
		} else {
			line += "\t-"
		}
		fmt.Fprintln(tw, line+"\t")
	}
	_ = tw.Flush()

	for _, r := range results {
		if r.Stalled != nil {
			fmt.Fprintf(w, "\n%s: %v\n", label(r), r.Stalled)
			if r.Stalled.After-r.Stalled.LastBind < stuckAfter {
				fmt.Fprintf(w, "  (pods were still being bound when the timeout hit: slow rather than stuck)\n")
			} else {
				fmt.Fprintf(w, "  (no pod bound in the last %v: stuck)\n", (r.Stalled.After - r.Stalled.LastBind).Round(time.Second))
			}
		}
		if r.Err != nil {
			fmt.Fprintf(w, "\n%s: error: %v\n", label(r), r.Err)
		}
		if len(r.Check.Problems) > 0 {
			fmt.Fprintf(w, "\n%s: checks failed:\n", label(r))
			for _, p := range r.Check.Problems {
				fmt.Fprintf(w, "  %s\n", p)
			}
		} else if r.Err == nil {
			fmt.Fprintf(w, "\n%s: checks passed: %d pods bound", label(r), r.Check.Bound)
			if r.Policy != "" {
				fmt.Fprintf(w, ", %d valid records, %d cards used (%d full), none over capacity", r.Check.Recorded, r.Check.CardsUsed, r.Check.FullCards)
			} else {
				fmt.Fprint(w, ", no node over its gpu-mem allocatable")
			}
			fmt.Fprintln(w)
		}
	}
}

// stuckAfter: a run whose last bind is older than this when the timeout
// hits is called stuck, else slow.
const stuckAfter = 30 * time.Second

func label(r Result) string {
	if r.Name == PlainAllNodes {
		return "(a) " + PlainAllNodes
	}
	if r.Policy == "" {
		return "(a) kube-scheduler"
	}
	return "(b) " + r.Name
}

func checkWord(r Result) string {
	switch {
	case r.Err != nil:
		return "ERROR"
	case r.Stalled != nil:
		return "STALLED"
	case !r.Check.OK():
		return "FAILED"
	}
	return "ok"
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func rate(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	switch v := s * 1000; {
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// msAtMost prints a quantile, as "≥top" when it reached the histogram's
// largest finite bucket (the histogram cannot say more).
func msAtMost(s, top float64) string {
	if top > 0 && s >= top {
		return "≥" + ms(top)
	}
	return ms(s)
}

func outcomes(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, m[k]))
	}
	return strings.Join(parts, " ")
}
