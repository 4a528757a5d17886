package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/usage"
)

// simContextMiB is what the dry run's simulated driver reports for a
// context holding no allocation.
const simContextMiB = 512

// usage is steps 2 and 3: a helper holds memory through the driver API, the
// sampler sees it and maps it to a pod through a pod-shaped cgroup, and the
// enforcer in kill mode kills it once its grant is below what it holds.
func (p *proof) usage(ctx context.Context) {
	r, o := p.r, p.o
	card := p.cards[o.Card]
	r.step(2, fmt.Sprintf("a helper holds %d MiB on card %d through the driver API (libcuda.so.1, dlopen)", o.HoldMiB, o.Card))
	if p.sim == nil && p.cudaErr != nil {
		r.check(false, "driver API (libcuda.so.1) loads: %v", p.cudaErr)
		r.skipped("steps 2 and 3 need the driver API")
		return
	}
	if p.sim != nil {
		r.info("dry run: the helper allocates nothing; the simulated NVML reports %d MiB for its context plus what it is told to hold", simContextMiB)
	}
	h, err := startHelper(o.Card, p.sim != nil, nil)
	if !r.check(err == nil, "helper started (err %v)", err) {
		return
	}
	defer h.close()
	r.info("helper: %s", h.Ready)
	p.setSim(h.PID, simContextMiB)

	// A pod-shaped cgroup for the helper, and the pod the cache would hold.
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", h.PID))
	sum := sha256.Sum256([]byte(uid))
	cid := fmt.Sprintf("%x", sum)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-proof", Name: "holder", UID: uid},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "cuda", ContainerID: "containerd://" + cid},
		}},
	}
	cg, cgErr := makePodCgroup(o.Cgroup, string(uid), cid, h.PID)
	if cgErr != nil {
		r.skipped("pod-shaped cgroup: %v (the helper stays in its own cgroup: in no pod)", cgErr)
	} else {
		defer cg.release(h.PID)
	}
	content, err := os.ReadFile(filepath.Join(o.Proc, strconv.Itoa(h.PID), "cgroup"))
	r.info("/proc/%d/cgroup: %s", h.PID, strings.ReplaceAll(strings.TrimSpace(string(content)), "\n", " | "))
	owner := usage.ParseCgroup(content)
	if cgErr == nil {
		r.check(err == nil && owner.PodUID == uid && owner.ContainerID == cid, "the sampler's cgroup parser names pod %s container %.12s… (got %q %.12q)", uid, cid, owner.PodUID, owner.ContainerID)
	}

	grant := &atomic.Int64{}
	grant.Store(card.MemoryMiB >> 10) // the whole card: under grant
	s := &usage.Sampler{
		NVML: p.lib, Cards: p.store.Cards, Unit: api.UnitGiB, Proc: o.Proc,
		Pods:         func() ([]*corev1.Pod, error) { return []*corev1.Pod{pod}, nil },
		PodResources: fixedGrant{pod: pod, container: "cuda", card: card.UUID, units: grant},
		Clock:        time.Now,
	}
	base, ok := p.helperUsage(ctx, s, h.PID, "context only")
	if !ok {
		return
	}
	reply, err := h.do(fmt.Sprintf("alloc %d", o.HoldMiB))
	if !r.check(err == nil && strings.HasPrefix(reply, "ok "), "cuMemAlloc(%d MiB): %s (err %v)", o.HoldMiB, reply, err) {
		return
	}
	p.setSim(h.PID, simContextMiB+o.HoldMiB)

	r.step(3, "the usage sampler sees the helper's memory and maps it to its pod")
	held, ok := p.helperUsage(ctx, s, h.PID, "holding")
	if !ok {
		return
	}
	delta := held.UsedBytes - base.UsedBytes
	const slack = 4 << 20 // the driver's allocation granularity is 2 MiB
	r.check(delta >= o.HoldMiB<<20 && delta <= o.HoldMiB<<20+slack,
		"NVML's figure grew by %d bytes (%.2f MiB) for an allocation of %d MiB (allowed: +%d MiB)", delta, float64(delta)/(1<<20), o.HoldMiB, slack>>20)
	if cgErr != nil {
		r.check(!held.Ref.InPod(), "the helper, in no pod, is counted as unaccounted memory on the card")
		r.skipped("enforcement: the helper is in no pod, and the enforcer never acts on processes in no pod")
		return
	}
	r.check(held.Ref.UID == uid && held.Ref.Container == "cuda" && held.Grant && held.GrantedBytes == grant.Load()<<30,
		"attributed to %s with a grant of %d GiB (got %s, grant %v, %d bytes)", "gpu-proof/holder/cuda", grant.Load(), held.Ref, held.Grant, held.GrantedBytes)
	p.enforce(ctx, s, h, held, grant)
}

// enforce: under its grant nothing happens; once the grant is below what
// it holds, the enforcer (--memory-enforcement=kill, no grace) kills it and
// the card's memory comes back.
func (p *proof) enforce(ctx context.Context, s *usage.Sampler, h *helper, held usage.Usage, grant *atomic.Int64) {
	r, o := p.r, p.o
	acts := &proofActions{kill: usage.KubeActions{Proc: o.Proc, Signal: usage.SignalKill}, r: r}
	e := &usage.Enforcer{Mode: usage.ModeKill, Policy: usage.Policy{}, Actions: acts, Log: klog.Background()}
	sample, err := s.Sweep(ctx)
	if !r.check(err == nil, "sweep (err %v)", err) {
		return
	}
	r.check(len(e.Observe(ctx, sample)) == 0, "kill mode leaves a container alone while it holds %d MiB of a %d GiB grant", held.UsedBytes>>20, grant.Load())
	grant.Store(o.GrantGiB)
	sample, err = s.Sweep(ctx)
	if !r.check(err == nil, "sweep (err %v)", err) {
		return
	}
	acted := e.Observe(ctx, sample)
	r.check(len(acted) == 1 && containsPID(acted[0].Usage.PIDs, h.PID), "with a grant of %d GiB the enforcer kills the container's processes (acted on %d, pids %v)", o.GrantGiB, len(acted), pidsOf(acted))
	how, err := h.wait(15 * time.Second)
	r.check(err == nil && strings.Contains(how, "killed"), "the helper ended: %s (err %v)", how, err)
	if p.sim != nil {
		p.sim.SetProcesses(o.Card, nil, nil) // the simulated driver frees a dead process's memory
	}
	gone := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		procs, err := p.lib.Processes(p.cards[o.Card].UUID)
		if err == nil && !containsProcess(procs, h.PID) {
			gone = true
			break
		}
	}
	r.check(gone, "NVML no longer lists pid %d on the card", h.PID)
}

// helperUsage sweeps once and returns the helper's usage row.
func (p *proof) helperUsage(ctx context.Context, s *usage.Sampler, pid int, what string) (usage.Usage, bool) {
	r := p.r
	sample, err := s.Sweep(ctx)
	if !r.check(err == nil, "sweep (err %v)", err) {
		return usage.Usage{}, false
	}
	for _, c := range sample.Cards {
		if c.Err != nil {
			r.info("card %d: sampler error %v", c.Index, c.Err)
			continue
		}
		r.info("card %d: %d MiB used by processes, %d MiB unaccounted", c.Index, c.UsedBytes>>20, c.UnaccountedBytes>>20)
	}
	for _, u := range sample.Usages {
		if containsPID(u.PIDs, pid) {
			r.check(u.Card == p.cards[p.o.Card].UUID, "%s: the sampler lists pid %d on card %d with %d bytes (%.1f MiB), as %s", what, pid, p.o.Card, u.UsedBytes, float64(u.UsedBytes)/(1<<20), u.Ref)
			return u, true
		}
	}
	procs, _ := p.lib.Processes(p.cards[p.o.Card].UUID)
	r.check(false, "%s: the sampler lists pid %d (NVML lists %v)", what, pid, procs)
	return usage.Usage{}, false
}

func (p *proof) setSim(pid int, mib int64) {
	if p.sim != nil {
		p.sim.SetProcesses(p.o.Card, []gonvml.ProcessInfo{{Pid: uint32(pid), UsedGpuMemory: uint64(mib) << 20}}, nil)
	}
}

// fixedGrant is the kubelet's PodResources as it would read for a container
// given units of one card.
type fixedGrant struct {
	pod             *corev1.Pod
	container, card string
	units           *atomic.Int64
}

func (f fixedGrant) Get(_ context.Context, _ []*corev1.Pod) ([]podresources.Holding, error) {
	h := podresources.Holding{Namespace: f.pod.Namespace, Pod: f.pod.Name, Container: f.container}
	for i := int64(0); i < f.units.Load(); i++ {
		h.IDs = append(h.IDs, api.UnitID(f.card, i))
	}
	return []podresources.Holding{h}, nil
}

// proofActions kill for real (the production KubeActions.Kill, which
// re-reads the cgroup first) and print what would be an Event.
type proofActions struct {
	kill usage.KubeActions
	r    *report
}

func (a *proofActions) Report(_ context.Context, v usage.Verdict, action string) error {
	a.r.info("event %s: %s uses %d MiB, allowed %d MiB (%s)", usage.ReasonKilled, v.Usage.Ref, v.Usage.UsedBytes>>20, v.AllowedBytes>>20, action)
	return nil
}

func (a *proofActions) Evict(context.Context, usage.Verdict) error {
	return errors.New("eviction needs an API server: not part of this proof")
}

func (a *proofActions) Kill(ctx context.Context, v usage.Verdict) error { return a.kill.Kill(ctx, v) }

func containsPID(pids []uint32, pid int) bool {
	for _, p := range pids {
		if int(p) == pid {
			return true
		}
	}
	return false
}

func containsProcess(procs []nvml.Process, pid int) bool {
	for _, p := range procs {
		if int(p.PID) == pid {
			return true
		}
	}
	return false
}

func pidsOf(vs []usage.Verdict) [][]uint32 {
	var out [][]uint32
	for _, v := range vs {
		out = append(out, v.Usage.PIDs)
	}
	return out
}
