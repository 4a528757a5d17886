// Command gpushare-nodeagent is the end-to-end tests' simulated kubelet for
// one Node: the real kubelet device manager, gpushare's device plugin beside
// it, the Node kept Ready and its pods admitted. It runs itself in a private
// mount namespace (root needed). See docs/e2e.md.
//
//	gpushare-nodeagent --node gpu-1 --kubeconfig K --state-dir D \
//	    --plugin bin/gpushare-device-plugin -- --nvml=sim:...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/test/nodeagent"
)

func main() {
	var o nodeagent.Options
	o.AddFlags(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Complete(flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-nodeagent:", err)
		os.Exit(2)
	}
	if !o.NoDeviceManager {
		inChild, code, err := nodeagent.ReexecInMountNamespace()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpushare-nodeagent:", err)
			os.Exit(1)
		}
		if !inChild {
			os.Exit(code)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := o.Run(ctx); err != nil {
		klog.ErrorS(err, "Node agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
