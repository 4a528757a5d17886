// Command gpushare-kubeletnode runs one real Kubernetes node for the e2e
// suite's container lane: containerd (through NVIDIA's container runtime in
// CDI mode with --nvidia-runtime), the kubelet and gpushare's device plugin, in
// a private mount namespace (root needed), torn down on SIGTERM. See
// docs/e2e.md.
//
//	gpushare-kubeletnode --node N --kubeconfig K --state-dir D --kubelet BIN \
//	    --pause-image NAME --image pause.tar --image probe.tar \
//	    --kubelet-port P --healthz-port H --cgroup-root /gpushare-e2e-X \
//	    --nvidia-runtime BIN --gpus 2x40GiB --plugin BIN -- --nvml=spec:2x40GiB
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/test/kubeletnode"
	"github.com/gpushare/gpushare/test/nodeagent"
)

func main() {
	var o kubeletnode.Options
	o.AddFlags(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Complete(flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-kubeletnode:", err)
		os.Exit(2)
	}
	inChild, code, err := nodeagent.ReexecInMountNamespace()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-kubeletnode:", err)
		os.Exit(1)
	}
	if !inChild {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := o.Run(ctx); err != nil {
		klog.ErrorS(err, "Node failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
