package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/response"
)

// eventNames are the NVML event types the proof names.
var eventNames = []struct {
	bit  uint64
	name string
}{
	{gonvml.EventTypeXidCriticalError, "XidCriticalError"},
	{gonvml.EventTypeSingleBitEccError, "SingleBitEccError"},
	{gonvml.EventTypeDoubleBitEccError, "DoubleBitEccError"},
	{gonvml.EventTypePState, "PState"},
	{gonvml.EventTypeClock, "Clock"},
	{gonvml.EventTypePowerSourceChange, "PowerSourceChange"},
	{gonvml.EventMigConfigChange, "MigConfigChange"},
}

// health is step 4: the events each card supports, then the plugin's own
// WatchHealth registered and waiting for a few seconds.
func (p *proof) health(ctx context.Context) {
	r := p.r
	r.step(4, "XID/health events, registered as the plugin registers them")
	for _, c := range p.cards {
		d, ret := p.raw.DeviceGetHandleByIndex(c.Index)
		if ret != gonvml.SUCCESS {
			r.check(false, "card %d handle: %v", c.Index, ret)
			continue
		}
		mask, ret := d.GetSupportedEventTypes()
		var names []string
		for _, e := range eventNames {
			if mask&e.bit != 0 {
				names = append(names, e.name)
			}
		}
		r.check(ret == gonvml.SUCCESS && mask&gonvml.EventTypeXidCriticalError != 0,
			"card %d supports XID events: mask %#x [%s] (%v)", c.Index, mask, strings.Join(names, " "), ret)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var events []nvml.HealthEvent
	err := p.lib.WatchHealth(wctx, func(e nvml.HealthEvent) { events = append(events, e) })
	r.check(err == nil, "the plugin's WatchHealth registered every card and waited 3 s for events (err %v)", err)
	unwatched := 0
	for _, e := range events {
		r.info("event: card %q: %s", e.UUID, e.Reason)
		if strings.Contains(e.Reason, "cannot") {
			unwatched++
		}
	}
	r.check(unwatched == 0, "no card was reported as unwatchable (%d events, %d unwatchable)", len(events), unwatched)
}

// mps is step 5: under NVIDIA MPS, the limit the plugin sets for a grant
// (response.MPSLimit) refuses an allocation above it; without it the same
// allocation succeeds.
func (p *proof) mps() {
	r, o := p.r, p.o
	r.step(5, "MPS: the plugin's per-client memory limit refuses an allocation above it")
	if p.sim != nil {
		r.skipped("MPS needs a real card and driver")
		return
	}
	ctl, err := exec.LookPath("nvidia-cuda-mps-control")
	if err != nil {
		r.skipped("nvidia-cuda-mps-control is not on PATH: %v", err)
		return
	}
	if p.cudaErr != nil {
		r.skipped("MPS clients need the driver API: %v", p.cudaErr)
		return
	}
	dir, err := os.MkdirTemp("", "gpu-proof-mps-")
	if !r.check(err == nil, "MPS directories (err %v)", err) {
		return
	}
	defer os.RemoveAll(dir)
	env := []string{api.EnvMPSPipeDirectory + "=" + filepath.Join(dir, "pipe"), "CUDA_MPS_LOG_DIRECTORY=" + filepath.Join(dir, "log")}
	for _, d := range []string{"pipe", "log"} {
		_ = os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	start := exec.Command(ctl, "-d")
	start.Env = append(os.Environ(), env...)
	out, err := start.CombinedOutput()
	if !r.check(err == nil, "%s -d started the MPS control daemon (%s, err %v)", ctl, strings.TrimSpace(string(out)), err) {
		return
	}
	defer func() {
		stop := exec.Command(ctl)
		stop.Env = append(os.Environ(), env...)
		stop.Stdin = strings.NewReader("quit\n")
		out, err := stop.CombinedOutput()
		r.check(err == nil, "MPS stopped with quit (%s, err %v)", strings.TrimSpace(string(out)), err)
		if b, err := os.ReadFile(filepath.Join(dir, "log", "control.log")); err == nil {
			r.info("MPS control.log, last lines: %s", lastLines(string(b), 4))
		}
	}()

	free, err := startHelper(o.Card, false, env)
	if r.check(err == nil, "an MPS client without a limit starts (err %v)", err) {
		reply, err := free.do(fmt.Sprintf("alloc %d", o.HoldMiB))
		r.check(err == nil && strings.HasPrefix(reply, "ok "), "without a limit, cuMemAlloc(%d MiB) succeeds: %s (err %v)", o.HoldMiB, reply, err)
		p.listUnderMPS(free.PID)
		free.close()
	}
	limit := response.MPSLimit(o.MPSLimitMiB)
	h, err := startHelper(o.Card, false, append(env, api.EnvMPSPinnedDeviceMemLimit+"="+limit))
	if !r.check(err == nil, "an MPS client with %s=%s starts (err %v)", api.EnvMPSPinnedDeviceMemLimit, limit, err) {
		return
	}
	defer h.close()
	r.info("limited client: %s", h.Ready)
	reply, err := h.do(fmt.Sprintf("alloc %d", o.HoldMiB))
	r.check(err == nil && strings.HasPrefix(reply, "err CUDA_ERROR_OUT_OF_MEMORY"), "above the limit, cuMemAlloc(%d MiB) is refused: %s (err %v)", o.HoldMiB, reply, err)
	// The client's context is charged to its limit: cuMemGetInfo's free is
	// the limit less the context (docs/hardware.md).
	left := readyFree(h.Ready) >> 20
	r.check(left > 0 && left < o.MPSLimitMiB, "the client sees its limit: cuMemGetInfo free %d MiB of a %d MiB limit (its context takes %d MiB of it)", left, o.MPSLimitMiB, o.MPSLimitMiB-left)
	reply, err = h.do(fmt.Sprintf("alloc %d", left/2))
	r.check(err == nil && strings.HasPrefix(reply, "ok "), "within what is left, cuMemAlloc(%d MiB) succeeds: %s (err %v)", left/2, reply, err)
}

// readyFree is the free=BYTES figure of a helper's ready line.
func readyFree(ready string) int64 {
	for _, f := range strings.Fields(ready) {
		if v, ok := strings.CutPrefix(f, "free="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// listUnderMPS says which PIDs NVML lists on the card while an MPS client
// holds memory: the client itself, or only the MPS server.
func (p *proof) listUnderMPS(client int) {
	procs, err := p.lib.Processes(p.cards[p.o.Card].UUID)
	if err != nil {
		p.r.info("under MPS, NVML could not list processes: %v", err)
		return
	}
	for _, pr := range procs {
		comm, _ := os.ReadFile(filepath.Join(p.o.Proc, fmt.Sprint(pr.PID), "comm"))
		p.r.info("under MPS, NVML lists pid %d (%s) with %d MiB (known %v)", pr.PID, strings.TrimSpace(string(comm)), pr.UsedBytes>>20, pr.UsedKnown)
	}
	p.r.info("the MPS client (pid %d) is listed itself: %v", client, containsProcess(procs, client))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
