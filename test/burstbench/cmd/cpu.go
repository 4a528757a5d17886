package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpushare/gpushare/test/burstbench"
)

// cpuTicks sums the user+system CPU time (clock ticks, 100 a second on
// Linux) of the processes whose command line names dir (the playground's
// state directory), by program name.
func cpuTicks(dir string) map[string]int64 {
	out := map[string]int64{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte(dir)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		out[filepath.Base(string(bytes.SplitN(cmd, []byte{0}, 2)[0]))] += u + s
	}
	return out
}

// cpuMeter records, per burst, the CPU seconds each of the cluster's
// programs spent between the first create and the last pod Ready.
type cpuMeter struct {
	dir   string
	spent map[burstbench.Mix]map[string]float64
	order []burstbench.Mix
}

func (m *cpuMeter) measure(mix burstbench.Mix) func() {
	before := cpuTicks(m.dir)
	return func() {
		after := cpuTicks(m.dir)
		s := map[string]float64{}
		for name, t := range after {
			s[name] = float64(t-before[name]) / 100
		}
		m.spent[mix] = s
		m.order = append(m.order, mix)
	}
}

// write prints the CPU seconds per program and burst.
func (m *cpuMeter) write(w io.Writer) {
	names := map[string]bool{}
	for _, s := range m.spent {
		for n := range s {
			names[n] = true
		}
	}
	if len(names) == 0 {
		return
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	fmt.Fprintf(w, "\nCPU seconds the processes under %s spent from first create to last Ready:\n\n", m.dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "program\t")
	for _, mix := range m.order {
		fmt.Fprintf(tw, "%s\t", mix)
	}
	fmt.Fprintln(tw)
	total := map[burstbench.Mix]float64{}
	for _, n := range sorted {
		fmt.Fprintf(tw, "%s\t", n)
		for _, mix := range m.order {
			fmt.Fprintf(tw, "%.2f\t", m.spent[mix][n])
			total[mix] += m.spent[mix][n]
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "total\t")
	for _, mix := range m.order {
		fmt.Fprintf(tw, "%.2f\t", total[mix])
	}
	fmt.Fprintln(tw)
	_ = tw.Flush()
}

// dumpTimelines writes each pod's timeline as CSV lines: burst, pod, kind,
// created, bound, Ready (wall clock, to join with the components' logs).
func dumpTimelines(path string, rounds [][]burstbench.Result) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-burstbench:", err)
		return
	}
	defer f.Close()
	for i, results := range rounds {
		for _, r := range results {
			burst := r.Mix.String()
			if len(rounds) > 1 {
				burst = fmt.Sprintf("%s (round %d)", burst, i+1)
			}
			for name, t := range r.Pods {
				fmt.Fprintf(f, "%s,%s,%s,%s,%s,%s\n", burst, name, t.Kind, t.Created.Format("15:04:05.000000"), t.Bound.Format("15:04:05.000000"), t.Ready.Format("15:04:05.000000"))
			}
		}
	}
}
