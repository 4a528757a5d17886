// Package nvml owns GPU discovery and GPU health for the device plugin. It
// wraps go-nvml behind the narrow Interface the plugin needs (list the cards,
// stream critical XID events, re-check a card) and builds that Interface over
// either the real NVML library or a simulated one (go-nvml's mock servers, or
// a spec such as "4x80GiB:NVIDIA-H100,2x40GiB:NVIDIA-A100").
package nvml

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"
)

// Card is one GPU as NVML reports it.
type Card struct {
	Index     int
	UUID      string
	Model     string
	MemoryMiB int64
}

// HealthEvent says a card failed (Healthy false) with a reason such as "XID 79".
// An empty UUID means every card (NVML itself failed).
type HealthEvent struct {
	UUID   string
	Reason string
}

// Interface is what the device plugin needs from the GPU driver.
type Interface interface {
	// Cards lists the cards, ordered by index.
	Cards() ([]Card, error)
	// WatchHealth blocks until ctx is done, calling report for every critical
	// event. It returns an error when NVML cannot watch events at all.
	WatchHealth(ctx context.Context, report func(HealthEvent)) error
	// Check re-checks one card (used to bring a card back after an XID): nil
	// when NVML answers queries about it.
	Check(uuid string) error
	// Processes lists the processes holding memory on one card (compute and
	// graphics contexts, one entry per PID), for the memory sampler.
	Processes(uuid string) ([]Process, error)
	// Shutdown releases NVML.
	Shutdown()
}

// Process is one process with a context on a card, as NVML reports it.
// PIDs are in the host's PID namespace when the plugin runs with hostPID
// (the chart sets it while memory sampling is on).
type Process struct {
	PID uint32
	// UsedBytes is the card memory the process holds. NVML answers
	// NVML_VALUE_NOT_AVAILABLE when it cannot tell (e.g. without permission);
	// such a process has UsedKnown false and UsedBytes 0.
	UsedBytes uint64
	UsedKnown bool
}

// ErrNoNVML is returned (wrapped) by Open when the NVML library or the driver
// is missing: the node has no usable GPU.
var ErrNoNVML = errors.New("NVML is not available")

// DefaultIgnoredXIDs are application errors (a faulty kernel, not a faulty
// card): 13 graphics engine exception, 31 GPU memory page fault, 43 GPU
// stopped processing, 45 preemptive cleanup, 68 video processor exception,
// 109 context switch timeout. The same list as NVIDIA's device plugin.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Options tune the NVML-backed Interface.
type Options struct {
	// IgnoredXIDs are XIDs that do not make a card unhealthy.
	IgnoredXIDs []uint64
	// WaitTimeoutMs bounds one NVML event wait, so that WatchHealth notices
	// ctx cancellation; 5000 when zero.
	WaitTimeoutMs uint32
	// LostBackoff is the first pause before WatchHealth waits for events
	// again after NVML answered ERROR_GPU_IS_LOST; each further loss in a
	// row doubles it, up to MaxLostBackoff. 1 s and 30 s when zero.
	LostBackoff, MaxLostBackoff time.Duration
	// Clock times the backoff (default: the real clock).
	Clock clock.Clock
}

type lib struct {
	nvml gonvml.Interface
	opts Options
}

// Open initialises lib and returns the Interface over it. A missing library
// or driver gives an error wrapping ErrNoNVML that says what is missing.
func Open(l gonvml.Interface, opts Options) (Interface, error) {
	opts.WaitTimeoutMs = cmp.Or(opts.WaitTimeoutMs, 5000)
	if opts.IgnoredXIDs == nil {
		opts.IgnoredXIDs = DefaultIgnoredXIDs
	}
	if opts.LostBackoff <= 0 {
		opts.LostBackoff = time.Second
	}
	if opts.MaxLostBackoff <= 0 {
		opts.MaxLostBackoff = 30 * time.Second
	}
	opts.Clock = cmp.Or[clock.Clock](opts.Clock, clock.RealClock{})
	switch ret := l.Init(); ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("%w: libnvidia-ml.so.1 not found (%v): install the NVIDIA driver on the node and run the plugin with the NVIDIA container runtime (runtimeClassName nvidia), or use --nvml=mock:dgxa100 / --nvml=spec:... for a simulated node", ErrNoNVML, ret)
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: the NVIDIA kernel driver is not loaded (%v): check `nvidia-smi` on the node", ErrNoNVML, ret)
	default:
		return nil, fmt.Errorf("%w: nvmlInit failed: %v", ErrNoNVML, ret)
	}
	return &lib{nvml: l, opts: opts}, nil
}

func (l *lib) Shutdown() { _ = l.nvml.Shutdown() }

func (l *lib) Cards() ([]Card, error) {
	n, ret := l.nvml.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %v", ret)
	}
	cards := make([]Card, 0, n)
	for i := 0; i < n; i++ {
		d, ret := l.nvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("nvml: device %d: %v", i, ret)
		}
		c, err := describe(d, i)
		if err != nil {
			return nil, err
		}
		cards = append(cards, c)
	}
	sort.Slice(cards, func(a, b int) bool { return cards[a].Index < cards[b].Index })
	return cards, nil
}

func describe(d gonvml.Device, i int) (Card, error) {
	uuid, ret := d.GetUUID()
	if ret != gonvml.SUCCESS {
		return Card{}, fmt.Errorf("nvml: device %d: UUID: %v", i, ret)
	}
	idx, ret := d.GetIndex()
	if ret != gonvml.SUCCESS {
		idx = i
	}
	name, ret := d.GetName()
	if ret != gonvml.SUCCESS {
		name = ""
	}
	mib, err := usableMiB(d)
	if err != nil {
		return Card{}, fmt.Errorf("nvml: device %d (%s): %w", i, uuid, err)
	}
	return Card{Index: idx, UUID: uuid, Model: name, MemoryMiB: mib}, nil
}

// usableMiB is the card memory CUDA can allocate: NVML's total less what the
// driver and firmware reserve (nvmlDeviceGetMemoryInfo_v2's Reserved), the
// figure cuDeviceTotalMem and nvidia-smi report. The older
// nvmlDeviceGetMemoryInfo counts the reservation in its total (and as
// "used" on an idle card): on an H100 80GB HBM3 with driver 580.159.04 it
// answers 81559 MiB where CUDA can have 81079 MiB (docs/hardware.md), so a
// node advertising it in MiB units would offer 480 MiB nobody can allocate.
// A driver without the v2 call (before R510) falls back to the v1 total.
func usableMiB(d gonvml.Device) (int64, error) {
	if m, ret := d.GetMemoryInfo_v2(); ret == gonvml.SUCCESS && m.Total > 0 && m.Reserved < m.Total {
		return int64((m.Total - m.Reserved) >> 20), nil
	}
	m, ret := d.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return 0, fmt.Errorf("memory info: %v", ret)
	}
	return int64(m.Total >> 20), nil
}

func (l *lib) Check(uuid string) error {
	d, ret := l.nvml.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: card %s: %v", uuid, ret)
	}
	if _, ret := d.GetMemoryInfo(); ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: card %s: memory info: %v", uuid, ret)
	}
	return nil
}

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long.
const valueNotAvailable = ^uint64(0)

// Processes asks NVML for the card's compute and graphics processes. A PID
// in both lists (a process with both kinds of context) is reported once,
// with the larger figure: both lists report the process's memory on the
// card, not a share of it.
func (l *lib) Processes(uuid string) ([]Process, error) {
	d, ret := l.nvml.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: card %s: %v", uuid, ret)
	}
	compute, ret := d.GetComputeRunningProcesses()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: card %s: compute processes: %v", uuid, ret)
	}
	graphics, ret := d.GetGraphicsRunningProcesses()
	if ret != gonvml.SUCCESS && ret != gonvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("nvml: card %s: graphics processes: %v", uuid, ret)
	}
	return mergeProcesses(compute, graphics), nil
}

func mergeProcesses(lists ...[]gonvml.ProcessInfo) []Process {
	var out []Process
	at := map[uint32]int{}
	for _, list := range lists {
		for _, p := range list {
			q := Process{PID: p.Pid}
			if p.UsedGpuMemory != valueNotAvailable {
				q.UsedBytes, q.UsedKnown = p.UsedGpuMemory, true
			}
			i, seen := at[p.Pid]
			if !seen {
				at[p.Pid] = len(out)
				out = append(out, q)
				continue
			}
			if q.UsedKnown && (!out[i].UsedKnown || q.UsedBytes > out[i].UsedBytes) {
				out[i] = q
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return out
}

func (l *lib) ignored(xid uint64) bool { return slices.Contains(l.opts.IgnoredXIDs, xid) }

// WatchHealth registers every card for critical XID events and reports the
// ones not in Options.IgnoredXIDs. If NVML loses the GPU (ERROR_GPU_IS_LOST)
// it reports every card unhealthy once, and waits again after a backoff
// (Options.LostBackoff, doubling up to MaxLostBackoff while the loss lasts;
// reset by the next answer that is not a loss) instead of asking NVML in a
// tight loop: a lost GPU answers every call at once. The cards come back
// through the health monitor's re-check (Check), as after an XID.
func (l *lib) WatchHealth(ctx context.Context, report func(HealthEvent)) error {
	set, ret := l.nvml.EventSetCreate()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: create event set: %v", ret)
	}
	defer func() { _ = set.Free() }()
	n, ret := l.nvml.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: device count: %v", ret)
	}
	for i := 0; i < n; i++ {
		d, ret := l.nvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: device %d: %v", i, ret)
		}
		supported, ret := d.GetSupportedEventTypes()
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: device %d: supported events: %v", i, ret)
		}
		// Like NVIDIA's device plugin: a card whose health cannot be watched
		// is not offered (run with --health-checks=false to offer it anyway).
		if supported&gonvml.EventTypeXidCriticalError == 0 {
			uuid, _ := d.GetUUID()
			report(HealthEvent{UUID: uuid, Reason: "card does not report XID events: health cannot be checked"})
			continue
		}
		if ret := d.RegisterEvents(gonvml.EventTypeXidCriticalError, set); ret != gonvml.SUCCESS {
			uuid, _ := d.GetUUID()
			report(HealthEvent{UUID: uuid, Reason: fmt.Sprintf("cannot register for XID events (%v): health cannot be checked", ret)})
			continue
		}
	}
	backoff := time.Duration(0) // 0: not in a loss
	for ctx.Err() == nil {
		e, ret := set.Wait(l.opts.WaitTimeoutMs)
		if ret == gonvml.ERROR_GPU_IS_LOST {
			if backoff == 0 {
				report(HealthEvent{Reason: "NVML: GPU is lost"})
				backoff = l.opts.LostBackoff
			} else {
				backoff = min(2*backoff, l.opts.MaxLostBackoff)
			}
			select {
			case <-ctx.Done():
			case <-l.opts.Clock.After(backoff):
			}
			continue
		}
		backoff = 0
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_TIMEOUT:
			continue
		default:
			return fmt.Errorf("nvml: wait for events: %v", ret)
		}
		if e.EventType != gonvml.EventTypeXidCriticalError || l.ignored(e.EventData) {
			continue
		}
		reason := fmt.Sprintf("XID %d", e.EventData)
		if e.Device == nil {
			report(HealthEvent{Reason: reason})
			continue
		}
		uuid, ret := e.Device.GetUUID()
		if ret != gonvml.SUCCESS {
			report(HealthEvent{Reason: reason}) // cannot tell which card: all of them
			continue
		}
		report(HealthEvent{UUID: uuid, Reason: reason})
	}
	return nil
}
