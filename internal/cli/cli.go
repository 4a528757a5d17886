// Package cli is how gpushare's three programs start, one way for all (the
// shape of kube-scheduler's and kubectl's commands): a cobra command built by
// each program's package, main only wiring the process to it (Run); pflag
// flags with defaults in the Options value; a flag of a program that runs in a
// Pod may take its value from an environment variable (BindEnv, ApplyEnv; the
// command line wins, --help names the variable); a daemon's rare settings in
// its versioned configuration file (LoadConfig), its former flags kept as
// hidden deprecated aliases (Aliases). Options are validated once, errors are
// returned, never os.Exit in library code: a usage mistake exits 2, anything
// else 1, as one "error: ..." line. Process-wide settings (signals, klog's
// output) belong to main or Run.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Exit statuses, as ExitCode maps errors to them.
const (
	ExitOK = 0
	// ExitError: the program failed at its work (unreachable cluster, no
	// GPU, a port taken, ...).
	ExitError = 1
	// ExitUsage: bad flags, arguments, environment variables or option
	// values: what the user asked for cannot run as given.
	ExitUsage = 2
)

// ErrUsage matches (errors.Is) every usage error.
var ErrUsage = errors.New("usage")

// usageError is an error about flags, arguments or option values; it reads
// as the error it wraps and matches ErrUsage.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Usage marks err as a usage error (nil stays nil).
func Usage(err error) error {
	if err == nil || errors.Is(err, ErrUsage) {
		return err
	}
	return usageError{err}
}

// Usagef is a usage error with a formatted message (%w wraps as in
// fmt.Errorf).
func Usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// FlagError is a cobra FlagErrorFunc: a flag the command line got wrong is a
// usage error that points at --help.
func FlagError(_ *cobra.Command, err error) error { return Usagef("%w (see --help)", err) }

// NoArgs is a cobra Args check for a program that takes flags only: an
// argument is a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q: %s takes flags only (see --help)", args[0], cmd.Name())
	}
	return nil
}

// Command is a program's root command, the one shape of gpushare's
// daemons: it takes flags only (NoArgs), a flag error is a usage error
// (FlagError), cobra prints neither usage nor errors (Run prints the error),
// and the flags' environment variables are applied (ApplyEnv with
// lookupEnv) before run is called; its long help ends with a paragraph
// saying so. The caller adds the flags.
func Command(use, short, long string, lookupEnv func(string) (string, bool), run func(cmd *cobra.Command) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

Every flag can also be set by the environment variable named in its description (the command
line wins; a variable set to "" gives the flag the empty value). The other settings are fields of
the --config file (docs/reference/).`,
		Args:          NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ApplyEnv(cmd.Flags(), lookupEnv); err != nil {
				return err
			}
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if a, ok := f.Value.(*alias); ok && len(a.raws) > 0 && !f.Changed {
					fmt.Fprintf(cmd.ErrOrStderr(), "Environment variable %s has been deprecated, %s\n", EnvOf(f), f.Deprecated)
				}
			})
			return run(cmd)
		},
	}
	cmd.SetFlagErrorFunc(FlagError)
	return cmd
}

// ExitCode maps a command's error to the process exit status: ExitOK for
// nil, ExitUsage for usage errors, ExitError otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	default:
		return ExitError
	}
}

// Run executes cmd with the process's arguments and a context that ends on
// SIGINT or SIGTERM, prints a failure as one "error: ..." line on stderr,
// flushes klog and returns the exit status for os.Exit. It is for main.
func Run(cmd *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "error: %v\n", err)
	}
	klog.Flush()
	return ExitCode(err)
}

// AddKlogFlags adds klog's flags (-v, --vmodule, --logtostderr, ...) to fs.
// klog keeps its settings in the process, as it always does; they change only
// when the flags are parsed.
func AddKlogFlags(fs *pflag.FlagSet) {
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
}

// envAnnotation is the pflag annotation that holds a flag's variable.
const envAnnotation = "gpushare.example.com/env"

// BindEnv gives every flag of fs the environment variable name(flag) ("" for
// none): ApplyEnv reads it and the flag's usage (so --help) ends with
// "(env NAME)". Call it after the flags are defined.
func BindEnv(fs *pflag.FlagSet, name func(flag string) string) {
	fs.VisitAll(func(f *pflag.Flag) {
		env := name(f.Name)
		if env == "" || EnvOf(f) != "" {
			return
		}
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{env}
		f.Usage += " (env " + env + ")"
	})
}

// EnvOf is the environment variable BindEnv gave f ("" for none).
func EnvOf(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// ApplyEnv sets every flag of fs that has a variable (BindEnv) and was not
// given on the command line from that variable, when the variable is set:
// the command line wins over the environment, the environment over the
// default. A variable set to the empty string counts as set (it gives the
// flag the empty value, e.g. "not used" for an optional path). A value the
// flag refuses is a usage error naming the variable and the flag; all of
// them are reported at once. lookup is os.LookupEnv outside tests.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := EnvOf(f)
		if env == "" || f.Changed {
			return
		}
		v, ok := lookup(env)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q (flag --%s): %w", env, v, f.Name, err))
		}
	})
	return Usage(errors.Join(errs...))
}
