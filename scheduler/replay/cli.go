package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// Options configure a command-line replay (gpushare-simulate).
type Options struct {
	// TracesDir holds openb/ and fgd_anchor_unallocated.csv.
	TracesDir string
	// Workloads are openb pod lists ("default" or "openb_pod_list_default");
	// "all" is the anchor's 17 workloads.
	Workloads []string
	// MemoryNodes and MemoryPods, when set, replay one memory-format trace
	// instead of openb workloads.
	MemoryNodes, MemoryPods string
	Policies                []string
	FirstSeed               int64
	Seeds                   int
	Inflate                 float64
	// NodesToScore models kube-scheduler's percentageOfNodesToScore
	// (Batch.NodesToScore; nil: 100, every node).
	NodesToScore *int
	// Scale replays each trace Scale times over as one cluster
	// (Trace.Scaled; 0 or 1: as it is).
	Scale int
	// WorkloadTolerance is Batch.WorkloadTolerance (nil: the extender's).
	WorkloadTolerance *float64
	Parallel          int
	// Output is "table" or "json".
	Output string
	PerRun bool
	// PNG, when set, is where the allocation curves of the first workload go.
	PNG string
	// JSONFile, when set, also gets the JSON report (whatever Output is).
	JSONFile string
	Stdout   io.Writer
	// Generate, when set, makes the workload instead of reading one (e.g.
	// synth.Generate): of Nodes[0] nodes with seed FirstSeed for a replay,
	// of each of Nodes with each seed for a curve.
	Generate func(nodes int, seed int64) (*Trace, error)
	Nodes    []int
	// Curve, when not empty, are the percentageOfNodesToScore settings of a
	// SamplingCurve of the first policy, printed instead of the report.
	Curve []int
	// Progress gets a line per finished replay (nil: none).
	Progress io.Writer
}

// Main loads the traces, replays them and writes the report.
func Main(ctx context.Context, o Options) error {
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: want table or json", o.Output)
	}
	if o.Seeds < 1 {
		return fmt.Errorf("-seeds %d: want at least 1", o.Seeds)
	}
	if p := o.NodesToScore; p != nil && (*p < 0 || *p > 100) {
		return fmt.Errorf("-nodes-to-score %d: want 0 (kube-scheduler's adaptive default) to 100", *p)
	}
	if tol := o.WorkloadTolerance; tol != nil && (*tol < 0 || *tol >= 1) {
		return fmt.Errorf("workloadTolerance %v (-config): want 0 (exact) to below 1", *tol)
	}
	if o.Generate != nil && len(o.Nodes) == 0 {
		return fmt.Errorf("a generated workload needs -nodes")
	}
	for _, n := range o.Nodes {
		if n < 1 {
			return fmt.Errorf("-nodes %d: want at least 1", n)
		}
	}
	var policies []*allocator.Policy
	for _, name := range o.Policies {
		name = strings.TrimSpace(name)
		switch name {
		case DRAModelName:
			policies = append(policies, KubeSchedulerDRA())
			continue
		case DRAScoredModelName:
			policies = append(policies, ExtenderScoredDRA())
			continue
		}
		p, err := registry.Lookup(name)
		if err != nil {
			return fmt.Errorf("%w (or the models of DRA placement: %s without the extender, %s with its frag scores)", err, DRAModelName, DRAScoredModelName)
		}
		policies = append(policies, p)
	}
	anchorPath := filepath.Join(o.TracesDir, "fgd_anchor_unallocated.csv")
	var anchor []AnchorRow
	if _, err := os.Stat(anchorPath); err == nil {
		if anchor, err = ReadAnchor(anchorPath); err != nil {
			return err
		}
	}
	if len(o.Curve) > 0 {
		return o.curve(ctx, policies[0])
	}
	var traces []*Trace
	if o.Generate != nil {
		t, err := o.Generate(o.Nodes[0], o.FirstSeed)
		if err != nil {
			return err
		}
		traces = append(traces, t)
	} else if o.MemoryNodes != "" || o.MemoryPods != "" {
		t, err := LoadMemory(o.MemoryNodes, o.MemoryPods)
		if err != nil {
			return err
		}
		traces = append(traces, t)
	} else {
		names := o.Workloads
		if len(names) == 1 && names[0] == "all" {
			if len(anchor) == 0 {
				return fmt.Errorf("-workloads all needs %s", anchorPath)
			}
			names = AnchorWorkloads(anchor)
			// The default trace first: the PNG shows the first workload.
			for i, n := range names {
				if n == "openb_pod_list_default" {
					copy(names[1:i+1], names[:i])
					names[0] = n
				}
			}
		}
		for _, name := range names {
			name = strings.TrimSpace(name)
			if !strings.HasPrefix(name, "openb_pod_list_") {
				name = "openb_pod_list_" + name
			}
			t, err := LoadOpenb(filepath.Join(o.TracesDir, "openb"), name)
			if err != nil {
				return err
			}
			traces = append(traces, t)
		}
	}
	if len(traces) == 0 {
		return fmt.Errorf("no workload to replay")
	}
	if o.Scale < 0 {
		return fmt.Errorf("scale %d (-config): want 1 (the trace's cluster) or more", o.Scale)
	}
	for i := range traces {
		traces[i] = traces[i].Scaled(o.Scale)
	}
	b := Batch{Traces: traces, Policies: policies, Inflate: o.Inflate, NodesToScore: o.NodesToScore, WorkloadTolerance: o.WorkloadTolerance, Parallel: o.Parallel, Progress: o.Progress}
	for s := range o.Seeds {
		b.Seeds = append(b.Seeds, o.FirstSeed+int64(s))
	}
	rep, err := b.Run(ctx)
	if err != nil {
		return err
	}
	if o.PNG != "" {
		var first []Summary
		for _, s := range rep.Summaries {
			if s.Trace == traces[0].Name {
				first = append(first, s)
			}
		}
		f, err := os.Create(o.PNG)
		if err != nil {
			return err
		}
		series := SeriesOf(first)
		if curves := filepath.Join(o.TracesDir, "fgd_allocation_curves.csv"); o.MemoryPods == "" {
			if _, err := os.Stat(curves); err == nil {
				extra, err := ReadAnchorCurves(curves, traces[0].Name, "05-BestFit", "06-FGD")
				if err != nil {
					f.Close()
					return err
				}
				series = append(series, extra...)
			}
		}
		if err := Plot(f, series, traces[0].Name); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if o.JSONFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSONFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := WriteTable(o.Stdout, rep, anchor, o.PerRun); err != nil {
		return err
	}
	return WriteMatrix(o.Stdout, rep, anchor)
}

// curve prints the SamplingCurve of policy over o.Nodes and o.Seeds seeds,
// on the generated workload.
func (o Options) curve(ctx context.Context, policy *allocator.Policy) error {
	if o.Generate == nil {
		return fmt.Errorf("-curve needs a generated workload (-synthetic FLEET/REQUESTS)")
	}
	c := SamplingCurve{Sizes: o.Nodes, Percents: o.Curve, Policy: policy, Inflate: o.Inflate, Make: o.Generate, Parallel: o.Parallel, Now: time.Now, Progress: o.Progress}
	for s := range o.Seeds {
		c.Seeds = append(c.Seeds, o.FirstSeed+int64(s))
	}
	points, err := c.Run(ctx)
	if err != nil {
		return err
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(points)
	}
	t, err := o.Generate(o.Nodes[0], o.FirstSeed)
	if err != nil {
		return err
	}
	return WriteCurve(o.Stdout, fmt.Sprintf("%s, %s, seeds %d-%d", strings.SplitN(t.Name, "_n", 2)[0], policy.Name, c.Seeds[0], c.Seeds[len(c.Seeds)-1]), points)
}

// ParseInts reads a comma-separated list of integers ("0,10,25"); an
// empty string is an empty list.
func ParseInts(flagName, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-%s %q: want comma-separated integers", flagName, s)
		}
		out = append(out, v)
	}
	return out, nil
}
