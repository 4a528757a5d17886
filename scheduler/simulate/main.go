// Command gpushare-simulate replays GPU-sharing traces (Alibaba's openb, or
// gpushare's memory format) through the extender's allocator and policies
// and reports how much GPU capacity each policy allocates (docs/packing.md).
//
//	gpushare-simulate -workloads default -policies binpack,fgd,frag
//	gpushare-simulate -config rare.yaml   # e.g. "scale: 4" or "workloadTolerance: 0"
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/replay"
	"github.com/gpushare/gpushare/scheduler/replay/synth"
)

func main() {
	o := replay.Options{Stdout: os.Stdout}
	var workloads, policies, synthetic, nodes, curve string
	flag.StringVar(&o.TracesDir, "traces", envOr("GPUSHARE_TRACES", "scheduler/simulate/traces"), "directory with openb/ and fgd_anchor_unallocated.csv (env GPUSHARE_TRACES)")
	flag.StringVar(&workloads, "workloads", "default", `comma-separated openb workloads ("default", "gpushare40", …) or "all" for the anchor's 17`)
	flag.StringVar(&o.MemoryNodes, "memory-nodes", "", "node file of a memory-format trace (replaces -workloads)")
	flag.StringVar(&o.MemoryPods, "memory-pods", "", "pod file of a memory-format trace")
	flag.StringVar(&synthetic, "synthetic", "", "generate the workload instead: FLEET/REQUESTS, fleets "+strings.Join(synth.FleetNames(), ", ")+", request mixes "+strings.Join(synth.RequestNames(), ", ")+" (replaces -workloads; the workload of -first-seed, or of each seed with -curve)")
	flag.StringVar(&nodes, "nodes", "1000", "comma-separated node counts of -synthetic (a replay uses the first)")
	flag.StringVar(&curve, "curve", "", `comma-separated percentageOfNodesToScore settings, e.g. "0,10,25,50,100": print what each costs the first policy against every node on -synthetic at each -nodes, instead of the report`)
	flag.StringVar(&policies, "policies", strings.Join(registry.Names(), ","), "comma-separated policies")
	flag.IntVar(&o.Seeds, "seeds", 10, "number of seeds (firstSeed, firstSeed+1, …)")
	o.NodesToScore = flag.Int("nodes-to-score", 100, "kube-scheduler's percentageOfNodesToScore to model: each pod's candidates are the first feasible nodes it would search (100: every node; 0: its adaptive sample, the shipped configuration)")
	flag.StringVar(&o.Output, "o", "table", "output: table or json")
	flag.StringVar(&o.PNG, "png", "", "write the allocation curves of the first workload to this PNG")
	flag.StringVar(&o.JSONFile, "json", "", "also write the JSON report to this file")
	config := flag.String("config", "", "YAML file of the rarer settings: "+strings.Join(configKeys, ", "))
	quiet := flag.Bool("quiet", false, "no progress lines on stderr")
	flag.Parse()
	if err := readConfig(&o, *config); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-simulate:", err)
		os.Exit(2)
	}
	if err := synthesize(&o, synthetic, nodes, curve); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-simulate:", err)
		os.Exit(2)
	}
	o.Workloads, o.Policies = strings.Split(workloads, ","), strings.Split(policies, ",")
	if !*quiet {
		o.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := replay.Main(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-simulate:", err)
		os.Exit(1)
	}
}

// synthesize sets o's generated workload, node counts and curve settings.
func synthesize(o *replay.Options, synthetic, nodes, curve string) (err error) {
	if o.Nodes, err = replay.ParseInts("nodes", nodes); err == nil {
		o.Curve, err = replay.ParseInts("curve", curve)
	}
	if err == nil && synthetic != "" {
		o.Generate, err = synth.Maker(synthetic)
	}
	return err
}

// settings are the rarer options, read from -config: unknown keys are refused.
type settings struct {
	FirstSeed         int64    `json:"firstSeed"`         // first seed (42)
	Inflate           float64  `json:"inflate"`           // add copies until the GPU request reaches this multiple of capacity
	Scale             int      `json:"scale"`             // replay each trace this many times over as one cluster (1)
	WorkloadTolerance *float64 `json:"workloadTolerance"` // how far the policies' workload may lag the pods seen (the extender's; 0: exact)
	Parallel          int      `json:"parallel"`          // replays at once (GOMAXPROCS)
	PerRun            bool     `json:"perRun"`            // also print every run
}

var configKeys = []string{"firstSeed", "inflate", "scale", "workloadTolerance", "parallel", "perRun"}

// readConfig sets o's rarer options from the YAML file path ("": the defaults).
func readConfig(o *replay.Options, path string) error {
	c := settings{FirstSeed: 42, Inflate: replay.DefaultInflate, Scale: 1, Parallel: runtime.GOMAXPROCS(0)}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("-config: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return fmt.Errorf("-config %s: %w (the keys are %s)", path, err, strings.Join(configKeys, ", "))
		}
	}
	o.FirstSeed, o.Inflate, o.Scale, o.WorkloadTolerance, o.Parallel, o.PerRun = c.FirstSeed, c.Inflate, c.Scale, c.WorkloadTolerance, c.Parallel, c.PerRun
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
