package nvml

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/google/go-cmp/cmp"
)

func TestProcessesMergesComputeAndGraphics(t *testing.T) {
	na := ^uint64(0)
	tests := []struct {
		name              string
		compute, graphics []gonvml.ProcessInfo
		graphicsRet       gonvml.Return
		want              []Process
	}{
		{
			name:     "compute and graphics processes are both listed, by PID",
			compute:  []gonvml.ProcessInfo{{Pid: 30, UsedGpuMemory: 3 << 30}},
			graphics: []gonvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 1 << 30}},
			want:     []Process{{PID: 10, UsedBytes: 1 << 30, UsedKnown: true}, {PID: 30, UsedBytes: 3 << 30, UsedKnown: true}},
		},
		{
			name:     "a PID in both lists is counted once, with the larger figure",
			compute:  []gonvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 2 << 30}},
			graphics: []gonvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 5 << 30}},
			want:     []Process{{PID: 7, UsedBytes: 5 << 30, UsedKnown: true}},
		},
		{
			name:    "NVML_VALUE_NOT_AVAILABLE is unknown, not 16 EiB",
			compute: []gonvml.ProcessInfo{{Pid: 9, UsedGpuMemory: na}},
			want:    []Process{{PID: 9}},
		},
		{
			name:        "a card without graphics support still lists compute processes",
			compute:     []gonvml.ProcessInfo{{Pid: 9, UsedGpuMemory: 1 << 20}},
			graphicsRet: gonvml.ERROR_NOT_SUPPORTED,
			want:        []Process{{PID: 9, UsedBytes: 1 << 20, UsedKnown: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := &mock.Device{
				GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return tt.compute, gonvml.SUCCESS },
				GetGraphicsRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
					if tt.graphicsRet != gonvml.SUCCESS {
						return nil, tt.graphicsRet
					}
					return tt.graphics, gonvml.SUCCESS
				},
			}
			l := &mock.Interface{
				InitFunc:                  func() gonvml.Return { return gonvml.SUCCESS },
				DeviceGetHandleByUUIDFunc: func(string) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
			}
			n, err := Open(l, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := n.Processes("GPU-x")
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Processes (-want +got):\n%s", d)
			}
		})
	}
}

func TestProcessesErrorNamesTheCard(t *testing.T) {
	l := &mock.Interface{
		InitFunc: func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(string) (gonvml.Device, gonvml.Return) {
			return &mock.Device{GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
				return nil, gonvml.ERROR_GPU_IS_LOST
			}}, gonvml.SUCCESS
		},
	}
	n, _ := Open(l, Options{})
	if _, err := n.Processes("GPU-lost"); err == nil || !strings.Contains(err.Error(), "GPU-lost") {
		t.Fatalf("err = %v, want an error naming the card", err)
	}
}

func TestSimulatorProcesses(t *testing.T) {
	sim := NewSimulator("node-a", gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	n, err := Open(sim.Library(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sim.SetProcesses(1, []gonvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}, []gonvml.ProcessInfo{{Pid: 200, UsedGpuMemory: 2 << 30}})
	got, err := n.Processes(sim.UUID(1))
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{{PID: 100, UsedBytes: 1 << 30, UsedKnown: true}, {PID: 200, UsedBytes: 2 << 30, UsedKnown: true}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("card 1 (-want +got):\n%s", d)
	}
	if got, _ := n.Processes(sim.UUID(0)); len(got) != 0 {
		t.Errorf("card 0 has %v, want no processes", got)
	}

	// A file drives the compute processes (the e2e node agent writes it).
	f := filepath.Join(t.TempDir(), "procs.json")
	sim.ReadProcessesFrom(f)
	if got, err := n.Processes(sim.UUID(0)); err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v; want no processes", got, err)
	}
	if err := os.WriteFile(f, []byte(`{"0":[{"pid":4242,"usedMiB":3072}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = n.Processes(sim.UUID(0))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Process{{PID: 4242, UsedBytes: 3072 << 20, UsedKnown: true}}, got); d != "" {
		t.Errorf("from file (-want +got):\n%s", d)
	}
	if err := os.WriteFile(f, []byte(`{"0":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Processes(sim.UUID(0)); err == nil {
		t.Error("malformed file: no error")
	}
}
