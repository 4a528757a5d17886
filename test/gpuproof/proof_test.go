package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) { // the helper, started from the test binary
	case "hold":
		os.Exit(holdMain(os.Args[1:]))
	case "show":
		os.Exit(showMain())
	}
	os.Exit(m.Run())
}

// The dry run exercises every step that needs no card against the
// simulated NVML: discovery, the helper, the sampler with the pod-shaped
// cgroup (when this machine lets us make one), enforcement by SIGKILL,
// event registration and the versions.
func TestDryRunPassesOnTheSimulatedNVML(t *testing.T) {
	o := defaultOptions()
	o.NVML = "spec:2x80GiB:NVIDIA-H100"
	var out bytes.Buffer
	err := run(context.Background(), o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("dry run failed: %v", err)
	}
	for _, want := range []string{
		"annotation gpushare.example.com/inventory:",
		"PASS NVML's figure grew by 2147483648 bytes",
		"PASS the plugin's WatchHealth registered every card",
		"SKIP MPS needs a real card and driver",
		"== result: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(out.String(), "PASS the helper ended: signal: killed") {
		t.Errorf("as root the pod-shaped cgroup is made and the enforcer kills the helper; output lacks it")
	}
	if _, err := exec.LookPath("runc"); err == nil && os.Geteuid() == 0 {
		for _, want := range []string{
			"PASS its environment names the claim's card",
			"PASS attributed to the claim's pod",
			"PASS over its 2 GiB claim the enforcer kills the container's process",
			"PASS NodeUnprepareResources removes the claim's CDI spec",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("as root with runc the DRA step runs its container; output lacks %q", want)
			}
		}
	}
}

// Without NVML (this machine has no driver) the real run fails and says why.
func TestRealRunWithoutADriverFailsClearly(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	var out bytes.Buffer
	err := run(context.Background(), defaultOptions(), &out)
	if err == nil || !strings.Contains(out.String(), "FAIL our NVML backend opens") || !strings.Contains(out.String(), "NVML is not available") {
		t.Fatalf("want a failed check naming the missing NVML; err %v, output:\n%s", err, out.String())
	}
}

func TestBadSizesAreRefused(t *testing.T) {
	o := defaultOptions()
	o.NVML = "spec:1x80GiB"
	o.HoldMiB = 512 // below the 1 GiB grant
	if err := run(context.Background(), o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "must be below --hold-mib") {
		t.Fatalf("err = %v, want the sizes refused", err)
	}
}
