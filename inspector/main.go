// Command kubectl-inspect-gpushare is the kubectl plugin `kubectl inspect
// gpushare`: it shows GPU-memory allocation per node and per card. Package
// inspect does the work; this file only wires the process to it.
package main

import (
	"flag"
	"io"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/inspector/inspect"
	"github.com/gpushare/gpushare/internal/cli"
)

func main() {
	silenceKlog()
	o := inspect.NewOptions(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	os.Exit(cli.Run(inspect.NewCmd(o)))
}

// silenceKlog keeps client-go's internal logging off the terminal, so that a
// failure is reported by the one line cli.Run prints.
func silenceKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}
