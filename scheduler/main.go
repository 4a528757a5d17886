// Command gpushare-scheduler is the gpushare scheduler extender: it answers
// kube-scheduler's filter, prioritize and bind calls for pods that request
// example.com/gpu-mem, placing each container on one GPU card. See
// docs/design.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/scheduler/app"
)

func main() {
	opts := app.DefaultOptions()
	fs := flag.NewFlagSet("gpushare-scheduler", flag.ContinueOnError)
	opts.AddFlags(fs)
	if err := app.Parse(fs, os.Args[1:], os.Getenv); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "gpushare-scheduler:", err)
		os.Exit(2)
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("gpushare-scheduler"))
	if err := app.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-scheduler:", err)
		klog.Flush()
		os.Exit(1)
	}
}
