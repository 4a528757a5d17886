package replay

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// A trace's multi-GPU task is read as a production pod asking for N whole
// cards (example.com/gpu), a share as one asking for gpu-mem.
func TestRequestTakesTheProductionPath(t *testing.T) {
	tests := []struct {
		name string
		pod  PodSpec
		want allocator.Request
	}{
		{"a multi-GPU task is a demand of N whole cards", PodSpec{Name: "t", WholeCards: 4, CPUMilli: 32000, MemoryMiB: 65536, Models: []string{"V100M32"}},
			allocator.Request{Demands: []allocator.Demand{{Container: "t", WholeCards: 4}}, Models: []string{"V100M32"}, Host: allocator.HostResources{CPUMilli: 32000, MemoryMiB: 65536}}},
		{"a share is a gpu-mem demand", PodSpec{Name: "s", Units: 300, CPUMilli: 4000, MemoryMiB: 1024},
			allocator.Request{Demands: []allocator.Demand{{Container: "s", Units: 300}}, Host: allocator.HostResources{CPUMilli: 4000, MemoryMiB: 1024}}},
		{"a CPU-only task asks for no GPU", PodSpec{Name: "c", CPUMilli: 1000},
			allocator.Request{Demands: []allocator.Demand{}, Host: allocator.HostResources{CPUMilli: 1000}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Request(tc.pod)); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}
