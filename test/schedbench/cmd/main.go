// Command gpushare-schedbench runs the scheduling-throughput benchmark
// (package schedbench; `make bench-scheduling`).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gpushare/gpushare/test/schedbench"
)

func main() {
	o := schedbench.DefaultOptions()
	policies := strings.Join(o.Policies, ",")
	flag.IntVar(&o.Nodes, "nodes", o.Nodes, "GPU nodes (API objects)")
	flag.IntVar(&o.Cards, "cards", o.Cards, "cards per node")
	flag.Int64Var(&o.CardGiB, "card-gib", o.CardGiB, "GiB per card")
	flag.IntVar(&o.Pods, "pods", o.Pods, "pods per run")
	flag.Int64Var(&o.PodGiB, "pod-gib", o.PodGiB, "GiB each pod asks")
	flag.IntVar(&o.Clients, "clients", o.Clients, "concurrent pod creations")
	flag.StringVar(&policies, "policies", policies, "extender policies to run, comma-separated (empty: none)")
	flag.BoolVar(&o.Plain, "plain", o.Plain, "run kube-scheduler alone first, its defaults (the reference for the ratio)")
	flag.BoolVar(&o.PlainAllNodes, "plain-all-nodes", o.PlainAllNodes, "then run kube-scheduler alone scoring every node (percentageOfNodesToScore: 100), with its own ratio column")
	flag.IntVar(&o.SchedulerQPS, "scheduler-qps", o.SchedulerQPS, "kube-scheduler's API client QPS (burst twice that) in every run, plain and with the extender (0: kube-scheduler's default, 50)")
	flag.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on each run, first creation to last bind; then the run is reported stalled")
	flag.StringVar(&o.ExtenderBinary, "extender", o.ExtenderBinary, "the built gpushare-scheduler")
	flag.StringVar(&o.BaselineBinary, "baseline", o.BaselineBinary, "another gpushare-scheduler (e.g. from the commit before a change): each policy runs through it first, reported as POLICY-before, then through -extender")
	flag.StringVar(&o.SchedulerConfig, "scheduler-config", o.SchedulerConfig, "KubeSchedulerConfiguration for the extender runs (default: the project's)")
	flag.BoolVar(&o.AllNodes, "all-nodes", o.AllNodes, "also run each policy with kube-scheduler scoring every node (the configuration with percentageOfNodesToScore: 100), reported as POLICY-all-nodes")
	flag.StringVar(&o.StateDir, "state-dir", o.StateDir, "control-plane state directory (default: a temporary one, removed after a clean run)")
	flag.BoolVar(&o.Keep, "keep", o.Keep, "keep the state directory (logs) after a clean run")
	flag.Parse()
	o.Policies = nil
	for _, p := range strings.Split(policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Policies = append(o.Policies, p)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := schedbench.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-schedbench:", err)
		os.Exit(1)
	}
}
