// Command gpushare-burstbench measures time to a running pod in a burst, GPU
// pods alone, pods without a request alone and both interleaved (package
// burstbench; `make bench-burst`), and on the playground the device floor:
// pods asking a do-nothing device plugin it serves on each node. It exits 1
// unless the target is met.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/burstbench"
)

func main() {
	o := burstbench.DefaultOptions()
	kubeconfig := flag.String("kubeconfig", "/tmp/gpushare-playground/kubeconfig", "the cluster's kubeconfig (default: the playground's)")
	flag.IntVar(&o.Pods, "pods", o.Pods, "pods per burst (the mixed burst: half of each kind)")
	flag.Int64Var(&o.GiB, "gib", o.GiB, "GiB each GPU pod asks for (example.com/gpu-mem)")
	flag.IntVar(&o.Clients, "clients", o.Clients, "concurrent pod creations")
	flag.StringVar(&o.GPUScheduler, "gpu-scheduler", o.GPUScheduler, "schedulerName of the GPU pods")
	flag.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for every pod to be Ready or Failed")
	flag.BoolVar(&o.Keep, "keep", o.Keep, "keep the namespace and its pods")
	only := flag.String("only", "", "run one burst alone: no-gpu, gpu, mixed or floor (no ratio is judged)")
	timelines := flag.String("timelines", "", "write each pod's create, bound and Ready times to this CSV file")
	policy := flag.String("policy", "", "the GPU pods' placement policy (annotation; empty: the extender's default)")
	rounds := flag.Int("rounds", 1, "run the bursts this many times, one suite after the other, and judge each ratio by its median over the rounds (a ratio of two single bursts' p90s moves by half between suites on a shared machine)")
	floor := flag.String("floor", "example.com/burst-floor", "on the playground, also time pods asking GIB of this resource from a do-nothing device plugin the bench serves on each node (the device floor; not judged); empty: no floor")
	flag.Parse()
	if o.Pods < 1 || o.GiB < 1 || o.Clients < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "gpushare-burstbench: -pods, -gib, -clients and -rounds must be at least 1")
		os.Exit(2)
	}
	if *policy != "" {
		o.Pod = func(p *corev1.Pod) {
			if _, gpu := p.Spec.Containers[0].Resources.Limits[api.DefaultNames().ResourceName()]; gpu {
				metav1.SetMetaDataAnnotation(&p.ObjectMeta, api.DefaultNames().AnnotationPolicy(), *policy)
			}
		}
	}
	switch *only {
	case "":
	case "no-gpu":
		o.Mixes = []burstbench.Mix{burstbench.PlainOnly}
	case "gpu":
		o.Mixes = []burstbench.Mix{burstbench.GPUOnly}
	case "mixed":
		o.Mixes = []burstbench.Mix{burstbench.Interleaved}
	case "floor":
		o.Mixes = []burstbench.Mix{burstbench.DeviceFloor}
	default:
		fmt.Fprintf(os.Stderr, "gpushare-burstbench: -only %q: want no-gpu, gpu, mixed or floor\n", *only)
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-burstbench: %v (is the playground up? make playground)\n", err)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the burst is the cluster's to absorb
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-burstbench:", err)
		os.Exit(2)
	}
	o.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "burstbench: "+format+"\n", args...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *floor != "" && (*only == "" || *only == "floor") {
		end, err := serveFloor(ctx, client, filepath.Dir(*kubeconfig), corev1.ResourceName(*floor))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpushare-burstbench: device floor:", err)
			os.Exit(2)
		}
		if end != nil {
			defer end()
			o.FloorResource = corev1.ResourceName(*floor)
		}
	}
	var all [][]burstbench.Result
	met := false
	for i := range *rounds {
		if *rounds > 1 {
			fmt.Printf("\n=== round %d of %d\n", i+1, *rounds)
		}
		// A meter per round: its table is this round's bursts.
		meter := &cpuMeter{dir: filepath.Dir(*kubeconfig), spent: map[burstbench.Mix]map[string]float64{}}
		o.Measure = meter.measure
		results := burstbench.RunSuite(ctx, client, o)
		met = burstbench.WriteSuite(os.Stdout, o, results)
		meter.write(os.Stdout)
		for _, r := range results {
			notReady(os.Stdout, r)
			if r.Err != nil {
				fmt.Fprintf(os.Stderr, "gpushare-burstbench: %s burst: %v\n", r.Mix, r.Err)
			}
		}
		if all = append(all, results); ctx.Err() != nil {
			break
		}
	}
	dumpTimelines(*timelines, all)
	if len(all) > 1 {
		met = burstbench.WriteRounds(os.Stdout, all)
	}
	if !met {
		os.Exit(1)
	}
}

// notReady prints each pod of the burst that failed or was never seen Ready.
func notReady(w io.Writer, r burstbench.Result) {
	names := make([]string, 0, len(r.Pods))
	for name := range r.Pods {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch t := r.Pods[name]; {
		case t.Failed:
			fmt.Fprintf(w, "%s burst: %s Failed: %s\n", r.Mix, name, t.FailedReason)
		case t.Ready.IsZero():
			fmt.Fprintf(w, "%s burst: %s not seen Ready (created %v, bound %v)\n", r.Mix, name, !t.Created.IsZero(), !t.Bound.IsZero())
		}
	}
}
