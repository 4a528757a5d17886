package inspect

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/cli"
)

// NewCmd returns the `kubectl inspect gpushare` command run with o, with its
// `pending` subcommand.
func NewCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use: "kubectl-inspect-gpushare [NODE] [-d] [-o json|yaml] [-w]",
		// kubectl runs the plugin for `kubectl inspect gpushare`; help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl inspect gpushare"},
		Short:       "Show GPU-memory allocation per node and per card",
		Long: `Show how much GPU memory (--resource-name, default ` + string(api.DefaultResourceName) + `) is allocated on each card of
each GPU node, as the gpushare scheduler extender counts it, what new pods can still get, and
warn about nodes whose GPU reporting is broken. "pending" lists the GPU pods waiting for a node.

The connection flags are kubectl's (KUBECONFIG is read as kubectl reads it). --domain,
--resource-name and --whole-resource-name must be the names the cluster's gpushare runs with (the
chart's names.*); they are also read from GPUSHARE_DOMAIN, GPUSHARE_RESOURCE_NAME and
GPUSHARE_WHOLE_RESOURCE_NAME. No other environment variable changes what the plugin does.`,
		Example: `  # one row per GPU node, one column per card
  kubectl inspect gpushare

  # every card of node gpu-node-1 and every pod on it
  kubectl inspect gpushare gpu-node-1 -d

  # why are my GPU pods waiting, and what would place them
  kubectl inspect gpushare pending -n ml

  # only the H100 cards of the nodes labelled pool=train, every 5 seconds
  kubectl inspect gpushare -l pool=train --model H100 -w --interval 5s

  # the same data for scripts
  kubectl inspect gpushare -o json`,
		Args:          cobra.ArbitraryArgs, // NODE; Complete checks the count
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, args []string) error { return o.execute(cmd, args) },
	}
	cmd.SetFlagErrorFunc(cli.FlagError)
	f := cmd.PersistentFlags()
	cmd.Flags().BoolVarP(&o.Details, "details", "d", false, "show every card with its model, UUID, state and pods")
	cmd.Flags().StringVar(&o.FromExtender, "from-extender", "", "read the gpushare scheduler extender's GET /inspect at this base URL (e.g. http://localhost:39998) instead of the API server")
	f.StringVarP(&o.Output, "output", "o", "", "output format: json or yaml (default: a table)")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "list only this namespace's pods (the figures still count every pod)")
	f.StringVarP(&o.Selector, "selector", "l", "", "label selector: on nodes in the node views, on pods in pending (e.g. pool=train)")
	f.StringVar(&o.Model, "model", "", "keep only the cards of this model, matched like the card-models pod annotation (e.g. H100, A100-80GB)")
	f.BoolVarP(&o.Watch, "watch", "w", false, "print the view again every --interval until interrupted")
	f.StringVar(&o.ReleaseNamespace, "release-namespace", "gpushare-system", "health: the namespace gpushare's chart is installed in")
	f.DurationVar(&o.Interval, "interval", defaultInterval, "how often --watch prints the view")
	o.ConfigFlags.AddFlags(f)
	names := pflag.NewFlagSet("names", pflag.ContinueOnError)
	o.Names.AddFlags(names)
	cli.BindEnv(names, func(flag string) string { return "GPUSHARE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) })
	f.AddFlagSet(names)

	cmd.AddCommand(o.subcommand("pending",
		"List the GPU pods waiting for a node, why, and what would place them",
		`List the GPU pods no node has been chosen for: what each asks for, the scheduler's reason
(the message of its PodScheduled condition, where the gpushare extender says why each node
was refused), and the smallest change found that would place it: the node that would take
it if some memory were freed (and the pods holding it), or that no card is of that size.`,
		&o.Pending))
	cmd.AddCommand(o.subcommand("health",
		"Say \"healthy\" or what is wrong with gpushare on this cluster (exit status 1 when unhealthy)",
		`Check an installation: the chart's device-plugin DaemonSet and scheduler Deployment in
--release-namespace have every pod ready and updated, at least one node reports GPU cards, and every
GPU node's inventory, capacity and pods' records agree (the warnings of the node view). Prints
"healthy: ..." or "unhealthy:" with one line per problem saying what to do, and exits 1 then.`,
		&o.Health))
	return cmd
}

// subcommand is a view of the command that takes no NODE argument (pending,
// health): it sets view, then runs like the command itself.
func (o *Options) subcommand(use, short, long string, view *bool) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("%s takes no NODE argument, got %d", use, len(args))
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			*view = true
			return o.execute(cmd, args)
		},
	}
	c.SetFlagErrorFunc(cli.FlagError)
	return c
}

// execute is one run of the command: Complete, Validate, Run.
func (o *Options) execute(cmd *cobra.Command, args []string) error {
	if err := cli.ApplyEnv(cmd.Flags(), os.LookupEnv); err != nil {
		return err
	}
	if err := o.Complete(cmd, args); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	return o.Run(cmd.Context())
}
