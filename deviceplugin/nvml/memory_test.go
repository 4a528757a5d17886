package nvml

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// oneCard is a go-nvml mock library with one card answering the given
// memory calls.
func oneCard(v1 func() (gonvml.Memory, gonvml.Return), v2 func() (gonvml.Memory_v2, gonvml.Return)) gonvml.Interface {
	dev := &mock.Device{
		GetUUIDFunc:          func() (string, gonvml.Return) { return "GPU-f1636297-d533-0475-1362-29a0a561f4bb", gonvml.SUCCESS },
		GetIndexFunc:         func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetNameFunc:          func() (string, gonvml.Return) { return "NVIDIA H100 80GB HBM3", gonvml.SUCCESS },
		GetMemoryInfoFunc:    v1,
		GetMemoryInfo_v2Func: v2,
	}
	return &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return 1, gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
	}
}

// What an H100 80GB HBM3 with driver 580.159.04 answered on an idle card
// (docs/hardware.md): v1 counts the driver's 480 MiB reservation in its
// total and as used; v2 reports it apart; cuDeviceTotalMem said 81079 MiB.
var (
	h100v1 = gonvml.Memory{Total: 81559 << 20, Used: 483 << 20, Free: 81076 << 20}
	h100v2 = gonvml.Memory_v2{Total: 81559 << 20, Reserved: 480 << 20, Used: 3 << 20, Free: 81076 << 20}
)

func TestCardMemoryIsWhatCUDACanAllocate(t *testing.T) {
	tests := []struct {
		name string
		v2   func() (gonvml.Memory_v2, gonvml.Return)
		want int64
	}{
		{"the driver's reservation is left out (H100, driver 580)", func() (gonvml.Memory_v2, gonvml.Return) { return h100v2, gonvml.SUCCESS }, 81079},
		{"a driver without the v2 call falls back to the v1 total", func() (gonvml.Memory_v2, gonvml.Return) {
			return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
		}, 81559},
		{"a v2 answer with a reservation above the total is not trusted", func() (gonvml.Memory_v2, gonvml.Return) {
			return gonvml.Memory_v2{Total: 1 << 30, Reserved: 2 << 30}, gonvml.SUCCESS
		}, 81559},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Open(oneCard(func() (gonvml.Memory, gonvml.Return) { return h100v1, gonvml.SUCCESS }, tt.v2), Options{})
			if err != nil {
				t.Fatal(err)
			}
			cards, err := n.Cards()
			if err != nil {
				t.Fatal(err)
			}
			if got := cards[0].MemoryMiB; got != tt.want {
				t.Errorf("MemoryMiB = %d, want %d", got, tt.want)
			}
		})
	}
}
