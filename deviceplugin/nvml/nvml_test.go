package nvml

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
)

func TestDiscoveryOverGoNVMLMockServer(t *testing.T) {
	// go-nvml's own dgxa100 mock server: 8 A100 40GB. It does not answer
	// nvmlDeviceGetMemoryInfo_v2; a driver before R510 does not either.
	srv := dgxa100.New()
	for _, d := range srv.Devices {
		d.(*server.Device).GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
		}
	}
	n, err := Open(srv, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cards, err := n.Cards()
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 8 {
		t.Fatalf("%d cards, want 8", len(cards))
	}
	for i, c := range cards {
		if c.Index != i || c.MemoryMiB != 40960 || c.Model != "Mock NVIDIA A100-SXM4-40GB" || !strings.HasPrefix(c.UUID, "GPU-") {
			t.Errorf("card %d = %+v", i, c)
		}
	}
}

func TestParseSource(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		wantMiB   []uint64
		wantModel string
		wantErr   string
	}{
		{name: "mock dgxh100 is 8 cards of 80 GiB", flag: "mock:dgxh100", wantMiB: []uint64{81920, 81920, 81920, 81920, 81920, 81920, 81920, 81920}},
		{name: "a spec mixes card sizes and models", flag: "spec:2x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100,1x512MiB", wantMiB: []uint64{81920, 81920, 40960, 512}, wantModel: "NVIDIA H100"},
		{name: "unknown mock server", flag: "mock:dgx1", wantErr: "unknown mock server"},
		{name: "size without unit", flag: "spec:2x80", wantErr: "must end in GiB or MiB"},
		{name: "zero cards", flag: "spec:0x80GiB", wantErr: "card count"},
		{name: "not a source", flag: "fake", wantErr: "want real, mock:dgxa100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := ParseSource(tt.flag)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var mib []uint64
			for _, g := range src.GPUs {
				mib = append(mib, g.MemoryMB)
			}
			if diff := cmp.Diff(tt.wantMiB, mib); diff != "" {
				t.Errorf("card sizes (-want +got):\n%s", diff)
			}
			if tt.wantModel != "" && src.GPUs[0].Name != tt.wantModel {
				t.Errorf("model %q, want %q", src.GPUs[0].Name, tt.wantModel)
			}
		})
	}
}

func TestSimulatedMixedNodeDiscovery(t *testing.T) {
	src, err := ParseSource("spec:1x80GiB:NVIDIA-H100,2x40GiB:NVIDIA-A100")
	if err != nil {
		t.Fatal(err)
	}
	n, sim, err := OpenSource(src, "node-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cards, err := n.Cards()
	if err != nil {
		t.Fatal(err)
	}
	got := []Card{}
	for _, c := range cards {
		got = append(got, Card{Index: c.Index, Model: c.Model, MemoryMiB: c.MemoryMiB})
	}
	want := []Card{{0, "", "NVIDIA H100", 81920}, {1, "", "NVIDIA A100", 40960}, {2, "", "NVIDIA A100", 40960}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	// UUIDs are stable for a node (a restarted plugin sees the same cards) and differ between nodes.
	again := NewSimulator("node-a", src.GPUs...)
	other := NewSimulator("node-b", src.GPUs...)
	if sim.UUID(1) != again.UUID(1) || sim.UUID(1) == other.UUID(1) || sim.UUID(0) == sim.UUID(1) {
		t.Errorf("UUIDs not stable per node: %s %s %s", sim.UUID(1), again.UUID(1), other.UUID(1))
	}
	if cards[1].UUID != sim.UUID(1) {
		t.Errorf("discovered UUID %s, simulator says %s", cards[1].UUID, sim.UUID(1))
	}
}

func TestOpenWithoutNVMLSaysWhatIsMissing(t *testing.T) {
	tests := []struct {
		name string
		ret  gonvml.Return
		want string
	}{
		{"library missing", gonvml.ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"},
		{"driver not loaded", gonvml.ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(&mock.Interface{InitFunc: func() gonvml.Return { return tt.ret }}, Options{})
			if !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrNoNVML saying %q", err, tt.want)
			}
		})
	}
}

func TestOpenRealLibraryOnThisMachine(t *testing.T) {
	n, err := Open(gonvml.New(), Options{})
	if err == nil {
		n.Shutdown()
		t.Skip("this machine has NVML: the no-GPU path cannot be shown here")
	}
	if !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") {
		t.Errorf("err = %v, want ErrNoNVML saying the library is missing", err)
	}
}

// events collects health events.
type events struct {
	mu  sync.Mutex
	got []HealthEvent
}

func (e *events) add(h HealthEvent) { e.mu.Lock(); e.got = append(e.got, h); e.mu.Unlock() }
func (e *events) list() []HealthEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]HealthEvent(nil), e.got...)
}

func TestWatchHealthReportsCriticalXIDs(t *testing.T) {
	src, _ := ParseSource("spec:2x40GiB")
	n, sim, err := OpenSource(src, "n", Options{IgnoredXIDs: append(DefaultIgnoredXIDs, 94), WaitTimeoutMs: 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ev events
	done := make(chan error)
	go func() { done <- n.WatchHealth(ctx, ev.add) }()
	sim.InjectXID(1, 13)  // application error: ignored
	sim.InjectXID(0, 94)  // ignored by option
	sim.InjectXID(1, 79)  // fallen off the bus
	sim.InjectXID(-1, 48) // no device: every card
	want := []HealthEvent{{UUID: sim.UUID(1), Reason: "XID 79"}, {UUID: "", Reason: "XID 48"}}
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return len(ev.list()) >= len(want), nil
	})
	cancel()
	if werr := <-done; werr != nil {
		t.Fatalf("WatchHealth: %v", werr)
	}
	if err != nil {
		t.Fatalf("events: %v (got %v)", err, ev.list())
	}
	if diff := cmp.Diff(want, ev.list()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	src, _ := ParseSource("spec:2x40GiB")
	n, sim, err := OpenSource(src, "n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Check(sim.UUID(0)); err != nil {
		t.Errorf("healthy card: %v", err)
	}
	sim.SetLost(0, true)
	if err := n.Check(sim.UUID(0)); err == nil {
		t.Error("lost card passes the check")
	}
	if err := n.Check("GPU-unknown"); err == nil {
		t.Error("unknown card passes the check")
	}
}

func TestWatchHealthMarksCardsItCannotWatch(t *testing.T) {
	src, _ := ParseSource("spec:3x40GiB")
	sim := NewSimulator("n", src.GPUs...)
	devs := sim.srv.Devices
	devs[0].(*server.Device).GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) { return 0, gonvml.SUCCESS }
	devs[1].(*server.Device).RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.ERROR_NOT_SUPPORTED }
	n, err := Open(sim.Library(), Options{WaitTimeoutMs: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ev events
	done := make(chan error)
	go func() { done <- n.WatchHealth(ctx, ev.add) }()
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return len(ev.list()) >= 2, nil })
	cancel()
	if werr := <-done; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatalf("events %v", ev.list())
	}
	got := ev.list()
	if got[0].UUID != sim.UUID(0) || !strings.Contains(got[0].Reason, "does not report XID events") ||
		got[1].UUID != sim.UUID(1) || !strings.Contains(got[1].Reason, "cannot register for XID events") {
		t.Errorf("events = %v", got)
	}
}
