// Package app wires the gpushare scheduler extender: it owns the program's
// command (NewCommand, started the one way internal/cli describes), its
// options (flags, each also settable from the environment for a
// Deployment), their validation, and Run, which builds the Kubernetes
// client, the informer-fed cache and the HTTP server and serves until the
// context ends.
//
// By concern: app.go, the command and Run; options.go, the options, their
// flags and validation; runtime.go, the Go runtime's tuning (memory limit,
// GC target); serve.go, the API clients and serving (Serve, the card-limits
// publisher); tls.go, the verbs' TLS and its reload when the files change;
// access.go, who may call the verbs, /inspect and /metrics.
package app

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/cli"
)

// NewCommand returns the gpushare-scheduler command: flags (AddFlags), each
// also set by its environment variable read through lookupEnv (os.LookupEnv
// in main; the command line wins), then Run until the command's context ends.
func NewCommand(lookupEnv func(string) (string, bool)) *cobra.Command {
	o := DefaultOptions()
	return newCommand(&o, lookupEnv, Run)
}

// newCommand is NewCommand with the options and what runs them injected.
func newCommand(o *Options, lookupEnv func(string) (string, bool), run func(context.Context, Options) error) *cobra.Command {
	long := `gpushare-scheduler answers kube-scheduler's extender calls (filter, prioritize, bind, preempt) for pods that
request GPU memory (default ` + string(api.DefaultResourceName) + `) or whole cards (default
` + string(api.DefaultWholeResourceName) + `), placing each container on one GPU card (docs/design.md).`
	cmd := cli.Command("gpushare-scheduler", "The gpushare scheduler extender: filter, prioritize and bind for pods requesting GPU memory", long, lookupEnv, func(cmd *cobra.Command) error {
		if err := cli.LoadConfig(cmd.Flags(), o.ConfigFile, Kind, o); err != nil {
			return err
		}
		ctx := klog.NewContext(cmd.Context(), klog.Background().WithName("gpushare-scheduler"))
		return run(ctx, *o)
	})
	o.AddFlags(cmd.Flags())
	return cmd
}

// Run validates the options, connects to the cluster and serves until ctx
// ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	setGCPercent(o.GCPercent, os.LookupEnv)
	setMemoryLimit(o.GoMemoryLimitFraction, os.LookupEnv, os.ReadFile)
	cfg, err := o.RestConfig()
	if err != nil {
		return err
	}
	cfg.UserAgent = "gpushare-scheduler"
	// One budget for every request: reads wait on it in client-go, Bindings
	// take their token in the bind verb, with its deadline (server.Config).
	budget := rate.NewLimiter(rate.Limit(o.KubeAPIQPS), o.KubeAPIBurst)
	cfg.RateLimiter = readLimiter{budget}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	bindCfg := rest.CopyConfig(cfg)
	bindCfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	bindClient, err := kubernetes.NewForConfig(bindCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ln, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var admin net.Listener
	if o.AdminListenAddress != "" {
		if admin, err = net.Listen("tcp", o.AdminListenAddress); err != nil {
			ln.Close()
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	auth, err := authClient(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	return Serve(ctx, o, Clients{Read: client, Bind: bindClient, Budget: budget, Auth: auth}, ln, admin)
}
