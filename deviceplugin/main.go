// Command gpushare-device-plugin is gpushare's kubelet device plugin: it
// advertises GPU memory as example.com/gpu-mem units, one device per unit,
// gives each container the card the scheduler extender assigned, and
// publishes the node's GPU inventory. docs/deviceplugin.md documents it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/deviceplugin/app"
)

func main() {
	fs := flag.NewFlagSet("gpushare-device-plugin", flag.ExitOnError)
	klog.InitFlags(fs)
	var o app.Options
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := app.ApplyEnv(fs); err != nil {
		fail(err)
	}
	if err := o.Validate(); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		fail(fmt.Errorf("kubernetes client configuration: %w", err))
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	ctx = klog.NewContext(ctx, klog.Background())
	if err := app.Run(ctx, o, client, hup); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gpushare-device-plugin:", err)
	os.Exit(1)
}
