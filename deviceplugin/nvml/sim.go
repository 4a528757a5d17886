package nvml

import (
	"cmp"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Simulator is a simulated NVML library: go-nvml's mock server with stable
// card UUIDs, plus an event set fed by InjectXID and cards that can be made
// to fail re-checks (SetLost). It backs --nvml=mock:... and --nvml=spec:...,
// the local playground and the tests.
type Simulator struct {
	srv    *server.Server
	events chan gonvml.EventData

	mu        sync.Mutex
	lost      map[int]bool
	compute   map[int][]gonvml.ProcessInfo
	graphics  map[int][]gonvml.ProcessInfo
	procsFile string
}

// NewSimulator builds a simulated node with one card per config. Card UUIDs
// are derived from seed (the node name) and the index, so a restarted plugin
// sees the same cards.
func NewSimulator(seed string, configs ...gpus.Config) *Simulator {
	s := &Simulator{
		srv:      server.NewServerWithGPUs("550.54.15", "12.550.54.15", 12040, configs...),
		events:   make(chan gonvml.EventData, 64),
		lost:     map[int]bool{},
		compute:  map[int][]gonvml.ProcessInfo{},
		graphics: map[int][]gonvml.ProcessInfo{},
	}
	for i, d := range s.srv.Devices {
		dev := d.(*server.Device)
		dev.UUID = stableUUID(seed, i)
		index := i
		dev.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) {
			return gonvml.EventTypeXidCriticalError | gonvml.EventTypeDoubleBitEccError | gonvml.EventTypeSingleBitEccError, gonvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS }
		dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.lost[index] {
				return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST
			}
			return dev.MemoryInfo, gonvml.SUCCESS
		}
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.lost[index] {
				return gonvml.Memory_v2{}, gonvml.ERROR_GPU_IS_LOST
			}
			return gonvml.Memory_v2{Total: dev.MemoryInfo.Total, Free: dev.MemoryInfo.Free, Used: dev.MemoryInfo.Used}, gonvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return s.processes(index, false)
		}
		dev.GetGraphicsRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return s.processes(index, true)
		}
	}
	s.srv.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &mock.EventSet{
			FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
			WaitFunc: func(timeoutMs uint32) (gonvml.EventData, gonvml.Return) {
				t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
				defer t.Stop()
				select {
				case e := <-s.events:
					return e, gonvml.SUCCESS
				case <-t.C:
					return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
				}
			},
		}, gonvml.SUCCESS
	}
	return s
}

// Library is the simulated go-nvml library, to pass to Open.
func (s *Simulator) Library() gonvml.Interface { return s.srv }

// UUID is the UUID of the card with this index.
func (s *Simulator) UUID(index int) string { return s.srv.Devices[index].(*server.Device).UUID }

// InjectXID delivers an XID critical-error event for the card with this index
// (an index out of range delivers an event with no device).
func (s *Simulator) InjectXID(index int, xid uint64) {
	e := gonvml.EventData{EventType: gonvml.EventTypeXidCriticalError, EventData: xid}
	if index >= 0 && index < len(s.srv.Devices) {
		e.Device = s.srv.Devices[index]
	}
	s.events <- e
}

// SetLost makes re-checks of the card fail (true) or pass (false).
func (s *Simulator) SetLost(index int, lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost[index] = lost
}

// SetProcesses sets the processes NVML reports on the card with this index:
// compute and graphics contexts with their memory (UsedGpuMemory
// ^uint64(0) is NVML's "not available").
func (s *Simulator) SetProcesses(index int, compute, graphics []gonvml.ProcessInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute[index] = append([]gonvml.ProcessInfo(nil), compute...)
	s.graphics[index] = append([]gonvml.ProcessInfo(nil), graphics...)
}

// SimProcesses is the file format of ReadProcessesFrom: card index (as a
// string) to the compute processes on it, e.g.
//
//	{"0": [{"pid": 4242, "usedMiB": 3072}]}
type SimProcesses map[string][]SimProcess

// SimProcess is one simulated compute process.
type SimProcess struct {
	PID     uint32 `json:"pid"`
	UsedMiB uint64 `json:"usedMiB"`
}

// ReadProcessesFrom makes every process query read the compute processes
// from this JSON file (SimProcesses), so that a harness outside the plugin
// (the e2e node agent) can say which real processes use how much memory.
// A missing file means no processes; a malformed one fails the query.
func (s *Simulator) ReadProcessesFrom(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procsFile = path
}

func (s *Simulator) processes(index int, graphics bool) ([]gonvml.ProcessInfo, gonvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost[index] {
		return nil, gonvml.ERROR_GPU_IS_LOST
	}
	if s.procsFile == "" || graphics {
		if graphics {
			return append([]gonvml.ProcessInfo(nil), s.graphics[index]...), gonvml.SUCCESS
		}
		return append([]gonvml.ProcessInfo(nil), s.compute[index]...), gonvml.SUCCESS
	}
	b, err := os.ReadFile(s.procsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, gonvml.SUCCESS
	}
	var f SimProcesses
	if err != nil || json.Unmarshal(b, &f) != nil {
		return nil, gonvml.ERROR_UNKNOWN
	}
	var out []gonvml.ProcessInfo
	for _, p := range f[strconv.Itoa(index)] {
		out = append(out, gonvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMiB << 20})
	}
	return out, gonvml.SUCCESS
}

func stableUUID(seed string, index int) string {
	h := sha1.Sum([]byte("gpushare-sim/" + seed + "/" + strconv.Itoa(index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// mockServers are the simulated machines --nvml=mock:NAME offers (8 cards each).
var mockServers = map[string]gpus.Config{
	"dgxa100": gpus.A100_SXM4_40GB,
	"dgxh100": gpus.H100_SXM5_80GB,
	"dgxh200": gpus.H200_SXM5_141GB,
	"dgxb200": gpus.B200_SXM5_180GB,
}

// Source is a parsed --nvml flag: the real library, or a simulated node.
type Source struct {
	// Real is true for the host's NVML library.
	Real bool
	// GPUs are the simulated cards when Real is false.
	GPUs []gpus.Config
}

// ParseSource parses the --nvml flag:
//
//	real                                   the host's NVML (libnvidia-ml.so.1)
//	mock:dgxa100|dgxh100|dgxh200|dgxb200   8 simulated cards of that machine
//	spec:4x80GiB:NVIDIA-H100,2x40GiB       simulated cards: COUNTxSIZE[:MODEL],...
//
// SIZE is a whole number followed by GiB or MiB; MODEL defaults to
// "Simulated GPU" and may use '-' for spaces.
func ParseSource(s string) (Source, error) {
	switch {
	case s == "real":
		return Source{Real: true}, nil
	case strings.HasPrefix(s, "mock:"):
		name := strings.TrimPrefix(s, "mock:")
		cfg, ok := mockServers[name]
		if !ok {
			return Source{}, fmt.Errorf("--nvml=%s: unknown mock server %q: use dgxa100, dgxh100, dgxh200 or dgxb200", s, name)
		}
		return Source{GPUs: gpus.Multiple(8, cfg)}, nil
	case strings.HasPrefix(s, "spec:"):
		var out []gpus.Config
		for _, item := range strings.Split(strings.TrimPrefix(s, "spec:"), ",") {
			cfgs, err := parseSpecItem(strings.TrimSpace(item))
			if err != nil {
				return Source{}, fmt.Errorf("--nvml=%s: %w", s, err)
			}
			out = append(out, cfgs...)
		}
		return Source{GPUs: out}, nil
	}
	return Source{}, fmt.Errorf("--nvml=%s: want real, mock:dgxa100 (or dgxh100, dgxh200, dgxb200) or spec:COUNTxSIZE[:MODEL],... e.g. spec:4x80GiB:NVIDIA-H100,2x40GiB", s)
}

func parseSpecItem(item string) ([]gpus.Config, error) {
	head, model, _ := strings.Cut(item, ":")
	countS, sizeS, ok := strings.Cut(head, "x")
	if !ok {
		return nil, fmt.Errorf("%q: want COUNTxSIZE[:MODEL], e.g. 4x80GiB:NVIDIA-H100", item)
	}
	count, err := strconv.Atoi(countS)
	if err != nil || count < 1 || count > 64 {
		return nil, fmt.Errorf("%q: card count %q must be 1..64", item, countS)
	}
	var mib int64
	switch {
	case strings.HasSuffix(sizeS, "GiB"):
		mib = 1024
	case strings.HasSuffix(sizeS, "MiB"):
		mib = 1
	default:
		return nil, fmt.Errorf("%q: card size %q must end in GiB or MiB", item, sizeS)
	}
	n, err := strconv.ParseInt(sizeS[:len(sizeS)-3], 10, 64)
	if err != nil || n < 1 || n > 1<<24 {
		return nil, fmt.Errorf("%q: card size %q must be a positive whole number of GiB or MiB", item, sizeS)
	}
	model = cmp.Or(model, "Simulated GPU")
	cfg := gpus.Config{
		Name:        strings.ReplaceAll(model, "-", " "),
		Brand:       gonvml.BRAND_NVIDIA,
		MemoryMB:    uint64(n * mib),
		CudaMajor:   9,
		PciDeviceId: 0x233010DE,
	}
	return gpus.Multiple(count, cfg), nil
}

// OpenSource opens the Interface the --nvml flag names. For a simulated
// source it also returns the Simulator (nil for the real library).
func OpenSource(src Source, seed string, opts Options) (Interface, *Simulator, error) {
	if src.Real {
		i, err := Open(gonvml.New(), opts)
		return i, nil, err
	}
	sim := NewSimulator(seed, src.GPUs...)
	i, err := Open(sim.Library(), opts)
	return i, sim, err
}
