package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/test/cluster"
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
	toolkit := filepath.Join(cluster.ToolkitBinDir(), "nvidia-container-runtime")
	if _, err := os.Stat(toolkit); err == nil {
		o.NvidiaRuntime = toolkit
	}
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
		if _, err := exec.LookPath(o.NvidiaRuntime); err == nil {
			for _, want := range []string{
				"PASS no mount, cdi mode: the container gets no card",
				"at /var/run/nvidia-container-devices/all, cdi mode: the container gets no card",
				"PASS host /dev/null at /var/run/nvidia-container-devices/all, cdi mode: the toolkit hands the container nvidia.com/gpu=all",
				"PASS host /dev/null at /var/run/nvidia-container-devices/cdi/nvidia.com/gpu/all, cdi mode: the toolkit hands the container nvidia.com/gpu=all",
				"PASS host /dev/null at /var/run/nvidia-container-devicesall, cdi mode: the toolkit hands the container nvidia.com/gpu=all",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("as root with runc and NVIDIA's runtime (%s) the toolkit step runs its containers; output lacks %q", o.NvidiaRuntime, want)
				}
			}
		}
	}
}

// What a container printed is read into the cards it saw: a real run's
// "show" output with one card, and the dry run's stand-in.
func TestShownReadsTheCardsAContainerSaw(t *testing.T) {
	const uuid = "GPU-4254ab5c-7cbb-0ded-705b-014a1b7af137"
	for _, tc := range []struct {
		name        string
		out         string
		sim         bool
		every, none bool
	}{
		{name: "a container with the card, its nodes, the driver API and nvidia-smi sees every card", every: true,
			out: "env NVIDIA_VISIBLE_DEVICES=void\ndev /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia0 /dev/nvidiactl\ncuda " + uuid + " NVIDIA H200\nsmi GPU 0: NVIDIA H200 (UUID: " + uuid + ")\n"},
		{name: "a container with no NVIDIA node, no driver API and no nvidia-smi sees none", none: true,
			out: "dev \ncuda unavailable: the NVIDIA driver API (libcuda.so.1) is not available\nsmi unavailable: exec: \"nvidia-smi\": executable file not found in $PATH\n"},
		{name: "the control nodes alone are no card, but not every card either", none: true,
			out: "dev /dev/nvidiactl /dev/nvidia-uvm\n"},
		{name: "a card node without the driver API is neither every card nor none",
			out: "dev /dev/nvidia0\ncuda unavailable: no libcuda\n"},
		{name: "another card than the node's is not every card",
			out: "dev /dev/nvidia0\ncuda GPU-other NVIDIA H200\nsmi GPU 0: NVIDIA H200\n"},
		{name: "the dry run's stand-in all device is every card", sim: true, every: true, out: "env NVIDIA_STAND_IN=all\ndev \n"},
		{name: "the dry run's stand-in for one card is not every card", sim: true, out: "env NVIDIA_STAND_IN=" + uuid + "\ndev \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseShown(tc.out)
			if got := s.everyCard([]string{uuid}, tc.sim); got != tc.every {
				t.Errorf("everyCard = %v, want %v (%+v)", got, tc.every, s)
			}
			if got := s.noCard(); got != tc.none {
				t.Errorf("noCard = %v, want %v (%+v)", got, tc.none, s)
			}
		})
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
