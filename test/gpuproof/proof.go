package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/test/gpuproof/cuda"
)

// options are the proof's flags.
type options struct {
	NVML        string
	Card        int
	HoldMiB     int64
	GrantGiB    int64
	MPSLimitMiB int64
	Cgroup      string
	Proc        string
	ClaimGiB    int64
	Runc        string
	NvidiaCtk   string
	NvidiaHooks bool
	// NvidiaRuntime is NVIDIA's nvidia-container-runtime (step 7).
	NvidiaRuntime string
}

func defaultOptions() options {
	return options{NVML: "real", HoldMiB: 2048, GrantGiB: 1, MPSLimitMiB: 1024, Cgroup: "/sys/fs/cgroup", Proc: "/proc", ClaimGiB: 2, Runc: "runc", NvidiaCtk: "nvidia-ctk", NvidiaHooks: true, NvidiaRuntime: "nvidia-container-runtime"}
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.NVML, "nvml", o.NVML, "GPU source, as the device plugin's --nvml: real, or spec:2x80GiB:NVIDIA-H100 for a dry run")
	fs.IntVar(&o.Card, "card", o.Card, "index of the card the helper allocates on")
	fs.Int64Var(&o.HoldMiB, "hold-mib", o.HoldMiB, "memory the helper allocates, MiB")
	fs.Int64Var(&o.GrantGiB, "grant-gib", o.GrantGiB, "grant the enforcement check gives the helper's container (below --hold-mib), GiB")
	fs.Int64Var(&o.MPSLimitMiB, "mps-limit-mib", o.MPSLimitMiB, "MPS per-client limit for the MPS check (below --hold-mib), MiB")
	fs.StringVar(&o.Cgroup, "cgroup", o.Cgroup, "the cgroup mount where a pod-shaped cgroup is made for the helper")
	fs.StringVar(&o.Proc, "proc", o.Proc, "the host's /proc")
	fs.Int64Var(&o.ClaimGiB, "claim-gib", o.ClaimGiB, "memory of the DRA check's claim (at most --hold-mib), GiB")
	fs.StringVar(&o.Runc, "runc", o.Runc, "runc, which runs the DRA check's container")
	fs.BoolVar(&o.NvidiaHooks, "nvidia-cdi-hooks", o.NvidiaHooks, "keep the hooks in NVIDIA's CDI spec (the loader cache, symlinks); false: none, and the library links are made in the root filesystem instead")
	fs.StringVar(&o.NvidiaCtk, "nvidia-ctk", o.NvidiaCtk, "nvidia-ctk, which writes NVIDIA's CDI spec for the DRA and toolkit checks (and is its hooks' program)")
	fs.StringVar(&o.NvidiaRuntime, "nvidia-runtime", o.NvidiaRuntime, "NVIDIA's nvidia-container-runtime, which creates the toolkit check's containers (runc under it)")
}

// report prints the proof's lines and counts its checks.
type report struct {
	out              io.Writer
	pass, fail, skip int
	failures         []string
}

func (r *report) step(n int, title string) { fmt.Fprintf(r.out, "\n== %d. %s\n", n, title) }
func (r *report) info(format string, args ...any) {
	fmt.Fprintf(r.out, "   "+format+"\n", args...)
}

// check records one check: ok, or a failure described by format.
func (r *report) check(ok bool, format string, args ...any) bool {
	msg := fmt.Sprintf(format, args...)
	if ok {
		r.pass++
		fmt.Fprintf(r.out, "   PASS %s\n", msg)
	} else {
		r.fail++
		r.failures = append(r.failures, msg)
		fmt.Fprintf(r.out, "   FAIL %s\n", msg)
	}
	return ok
}

func (r *report) skipped(format string, args ...any) {
	r.skip++
	fmt.Fprintf(r.out, "   SKIP "+format+"\n", args...)
}

// proof is one run's state.
type proof struct {
	o     options
	r     *report
	raw   gonvml.Interface
	sim   *nvml.Simulator // nil on a real card
	lib   nvml.Interface
	cards []nvml.Card
	store *inventory.Store
	// cudaErr is why the driver API cannot be used (nil: it can).
	cudaErr error
}

func run(ctx context.Context, o options, out io.Writer) error {
	if o.GrantGiB<<10 >= o.HoldMiB || o.MPSLimitMiB >= o.HoldMiB || o.ClaimGiB<<10 > o.HoldMiB || o.ClaimGiB <= 0 {
		return fmt.Errorf("--grant-gib (%d GiB) and --mps-limit-mib (%d MiB) must be below --hold-mib (%d MiB), --claim-gib (%d GiB) positive and at most it", o.GrantGiB, o.MPSLimitMiB, o.HoldMiB, o.ClaimGiB)
	}
	src, err := nvml.ParseSource(o.NVML)
	if err != nil {
		return err
	}
	p := &proof{o: o, r: &report{out: out}}
	if src.Real {
		p.raw = gonvml.New()
		p.cudaErr = cuda.Open()
	} else {
		p.sim = nvml.NewSimulator("gpu-proof", src.GPUs...)
		p.raw = p.sim.Library()
		p.cudaErr = errors.New("simulated NVML (dry run): no driver API")
	}
	fmt.Fprintf(out, "gpu-proof: --nvml=%s, helper on card %d holding %d MiB\n", o.NVML, o.Card, o.HoldMiB)
	p.lib, err = nvml.Open(p.raw, nvml.Options{WaitTimeoutMs: 500})
	if err != nil {
		p.r.step(1, "discovery")
		p.r.check(false, "our NVML backend opens: %v", err)
		return p.finish()
	}
	defer p.lib.Shutdown()
	if p.discover() {
		p.usage(ctx)
		p.health(ctx)
		p.mps()
		p.draProof(ctx)
		p.toolkitProof(ctx)
	}
	p.versions()
	return p.finish()
}

func (p *proof) finish() error {
	r := p.r
	fmt.Fprintf(r.out, "\n== result: %d passed, %d failed, %d skipped\n", r.pass, r.fail, r.skip)
	if r.fail > 0 {
		return fmt.Errorf("%d check(s) failed: %s", r.fail, strings.Join(r.failures, "; "))
	}
	return nil
}

// discover is step 1: the cards through our backend, their MIG mode, and
// the inventory annotation the plugin would publish.
func (p *proof) discover() bool {
	r := p.r
	r.step(1, "discovery through our NVML backend (--nvml="+p.o.NVML+")")
	cards, err := p.lib.Cards()
	if !r.check(err == nil && len(cards) > 0, "cards listed: %d (err %v)", len(cards), err) {
		return false
	}
	p.cards = cards
	for _, c := range cards {
		mig := "n/a"
		d, ret := p.raw.DeviceGetHandleByIndex(c.Index)
		if ret == gonvml.SUCCESS {
			cur, pend, ret := d.GetMigMode()
			switch ret {
			case gonvml.SUCCESS:
				mig = fmt.Sprintf("current %s, pending %s", migName(cur), migName(pend))
			case gonvml.ERROR_NOT_SUPPORTED:
				mig = "not supported"
			default:
				mig = "error " + ret.Error()
			}
			if ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE {
				r.info("card %d has MIG enabled: the plugin offers the whole card's memory; MIG instances are not shared by gpushare", c.Index)
			}
			if mem, ret := d.GetMemoryInfo(); ret == gonvml.SUCCESS {
				r.info("card %d: nvmlDeviceGetMemoryInfo:    total %d MiB, used %d MiB, free %d MiB", c.Index, mem.Total>>20, mem.Used>>20, mem.Free>>20)
			}
			if m2, ret := d.GetMemoryInfo_v2(); ret == gonvml.SUCCESS {
				r.info("card %d: nvmlDeviceGetMemoryInfo_v2: total %d MiB, reserved %d MiB, used %d MiB, free %d MiB", c.Index, m2.Total>>20, m2.Reserved>>20, m2.Used>>20, m2.Free>>20)
				r.check(int64((m2.Total-m2.Reserved)>>20) == c.MemoryMiB, "card %d: backend memory %d MiB = NVML v2 total less reserved", c.Index, c.MemoryMiB)
			}
		}
		r.info("card %d: %s  model %q  memory %d MiB  MIG %s", c.Index, c.UUID, c.Model, c.MemoryMiB, mig)
	}
	if p.o.Card < 0 || p.o.Card >= len(cards) {
		r.check(false, "--card %d exists (the node has %d)", p.o.Card, len(cards))
		return false
	}
	p.store, err = inventory.New(api.UnitGiB, cards)
	if !r.check(err == nil, "the cards form a valid inventory (err %v)", err) {
		return false
	}
	inv := p.store.Inventory()
	enc, err := api.EncodeInventory(inv)
	if !r.check(err == nil, "inventory encodes (err %v)", err) {
		return false
	}
	r.info("annotation %s: %s", api.DefaultNames().AnnotationInventory(), enc)
	back, err := api.DecodeInventory(enc)
	want := int64(0)
	for _, c := range cards {
		want += api.UnitGiB.UnitsFromMiB(c.MemoryMiB)
	}
	r.check(err == nil && back.TotalUnits() == want && len(back.Cards) == len(cards),
		"the annotation decodes to %d cards and %d GiB units (want %d, err %v)", len(back.Cards), back.TotalUnits(), want, err)
	return true
}

func migName(m int) string {
	if m == gonvml.DEVICE_MIG_ENABLE {
		return "enabled"
	}
	return "disabled"
}

// versions is step 8: driver, NVML and card versions, cross-checked between
// NVML, the kernel module and the driver API.
func (p *proof) versions() {
	r := p.r
	r.step(8, "driver, NVML and card versions")
	drv, ret1 := p.raw.SystemGetDriverVersion()
	nv, ret2 := p.raw.SystemGetNVMLVersion()
	cv, ret3 := p.raw.SystemGetCudaDriverVersion()
	r.check(ret1 == gonvml.SUCCESS && ret2 == gonvml.SUCCESS && ret3 == gonvml.SUCCESS,
		"NVML: driver %s, NVML %s, CUDA driver API %s", drv, nv, cudaVersion(cv))
	for _, c := range p.cards {
		d, ret := p.raw.DeviceGetHandleByIndex(c.Index)
		if ret != gonvml.SUCCESS || p.sim != nil { // go-nvml's mock answers none of these
			continue
		}
		vbios, _ := d.GetVbiosVersion()
		inforom, _ := d.GetInforomImageVersion()
		major, minor, _ := d.GetCudaComputeCapability()
		pci, _ := d.GetPciInfo()
		r.info("card %d: VBIOS %s, InfoROM %s, compute capability %d.%d, PCI %s", c.Index, vbios, inforom, major, minor, busID(pci))
	}
	if p.sim != nil {
		r.skipped("kernel module and driver API cross-checks: %v", p.cudaErr)
		return
	}
	if b, err := os.ReadFile("/proc/driver/nvidia/version"); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		r.check(strings.Contains(string(b), drv), "kernel module reports driver %s: %s", drv, strings.TrimSpace(first))
	} else {
		r.skipped("/proc/driver/nvidia/version: %v", err)
	}
	if p.cudaErr != nil {
		r.check(false, "driver API (libcuda.so.1) loads: %v", p.cudaErr)
		return
	}
	v, err := cuda.DriverVersion()
	r.check(err == nil && v == cv, "driver API version %s = NVML's %s (err %v)", cudaVersion(v), cudaVersion(cv), err)
	devs, err := cuda.Devices()
	if !r.check(err == nil && len(devs) == len(p.cards), "driver API sees %d cards, NVML %d (err %v)", len(devs), len(p.cards), err) {
		return
	}
	byUUID := map[string]nvml.Card{}
	for _, c := range p.cards {
		byUUID[c.UUID] = c
	}
	for _, d := range devs {
		c, ok := byUUID[d.UUID]
		if !r.check(ok, "driver API device %d %s is an NVML card", d.Ordinal, d.UUID) {
			continue
		}
		diff := int64(d.TotalBytes>>20) - c.MemoryMiB
		r.check(d.Name == c.Model && diff == 0, "device %d: driver API %q %d MiB (cuDeviceTotalMem) = our backend's %q %d MiB", d.Ordinal, d.Name, d.TotalBytes>>20, c.Model, c.MemoryMiB)
	}
}

func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

func busID(p gonvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusIdLegacy))
	for _, c := range p.BusIdLegacy {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
