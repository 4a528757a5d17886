// Command gpu-proof runs gpushare's node-agent code paths against a real
// NVIDIA card and says what the driver answered: discovery through our NVML
// backend, per-process memory seen by the usage sampler (mapped to a pod
// through /proc/PID/cgroup, and enforced by SIGKILL), XID event
// registration, MPS's per-client memory limit, a DRA claim's container
// started through CDI, NVIDIA's container runtime handing every card to a
// container that mounts /dev/null under /var/run/nvidia-container-devices,
// and the driver, NVML and card versions, cross-checked between NVML and
// the driver API. It needs
// the NVIDIA driver but no CUDA toolkit, Kubernetes or network, and exits
// non-zero on any failed check. With --nvml=spec:... it dry-runs against
// the simulated NVML (the steps that need a card say so and are skipped).
//
// docs/hardware.md has the output of a run on a real card.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// roleEnv marks the helper process this program starts as itself.
const roleEnv = "GPUSHARE_GPU_PROOF_ROLE"

func main() {
	switch os.Getenv(roleEnv) {
	case "hold":
		os.Exit(holdMain(os.Args[1:]))
	case "show":
		os.Exit(showMain())
	}
	o := defaultOptions()
	fs := flag.NewFlagSet("gpu-proof", flag.ExitOnError)
	o.bind(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-proof:", err)
		os.Exit(1)
	}
}

func holdMain(args []string) int {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	card := fs.Int("card", 0, "card ordinal")
	sim := fs.Bool("sim", false, "answer without a driver (dry run)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := hold(*card, *sim, os.Stdin, os.Stdout); err != nil {
		return 1
	}
	return 0
}
