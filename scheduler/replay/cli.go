package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	var traces []*Trace
	if o.MemoryNodes != "" || o.MemoryPods != "" {
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
		return fmt.Errorf("-scale %d: want 1 (the trace's cluster) or more", o.Scale)
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
