package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/util/wait"
)

// toolkitDeviceRoot is the container path under which NVIDIA's container
// toolkit reads device requests from mounts whose host source is /dev/null
// (DeviceListAsVolumeMountsRoot, internal/config/image/cuda_image.go). It
// tests a string prefix of the cleaned path, so ".../nvidia-container-devicesall"
// asks for "all" too.
const toolkitDeviceRoot = "/var/run/nvidia-container-devices"

// mountCase is one container of step 7: a mount (none when Source is
// empty) and the runtime mode, and whether the toolkit should hand it every
// card or none.
type mountCase struct {
	What, Mode, Source, Dest string
	All                      bool
}

// mountCases are step 7's containers: two controls (no mount; a mount of
// another host file at the right path, the recipe that looks at the host
// path), the three forms of the /dev/null mount in cdi mode, and the
// plain form and its control in jit-cdi mode (a spec made in memory).
func mountCases(otherFile string) []mountCase {
	return []mountCase{
		{What: "no mount", Mode: "cdi"},
		{What: "host " + otherFile + " at " + toolkitDeviceRoot + "/all", Mode: "cdi", Source: otherFile, Dest: toolkitDeviceRoot + "/all"},
		{What: "host /dev/null at " + toolkitDeviceRoot + "/all", Mode: "cdi", Source: "/dev/null", Dest: toolkitDeviceRoot + "/all", All: true},
		{What: "host /dev/null at " + toolkitDeviceRoot + "/cdi/nvidia.com/gpu/all", Mode: "cdi", Source: "/dev/null", Dest: toolkitDeviceRoot + "/cdi/nvidia.com/gpu/all", All: true},
		{What: "host /dev/null at " + toolkitDeviceRoot + "all", Mode: "cdi", Source: "/dev/null", Dest: toolkitDeviceRoot + "all", All: true},
		{What: "no mount", Mode: "jit-cdi"},
		{What: "host /dev/null at " + toolkitDeviceRoot + "/all", Mode: "jit-cdi", Source: "/dev/null", Dest: toolkitDeviceRoot + "/all", All: true},
	}
}

// toolkitConfig is the config.toml of NVIDIA's runtime for mode: device
// requests accepted as volume mounts (as a device plugin with the
// volume-mounts strategy needs), none from the environment of an
// unprivileged container, CDI specs from specDir, runc as the low-level
// runtime, nvidia-ctk as the hooks' program, a debug log at logPath.
func toolkitConfig(mode, specDir, runc, ctk, logPath string) string {
	return fmt.Sprintf(`accept-nvidia-visible-devices-as-volume-mounts = true
accept-nvidia-visible-devices-envvar-when-unprivileged = false

[nvidia-ctk]
path = %q

[nvidia-container-runtime]
debug = %q
log-level = "debug"
mode = %q
runtimes = [%q]

[nvidia-container-runtime.modes.cdi]
default-kind = %q
spec-dirs = [%q]
`, ctk, logPath, mode, runc, nvidiaKind, specDir)
}

// shown is what a container's "show" role printed about the cards.
type shown struct {
	CUDA    []string // UUIDs the driver API lists
	SMI     int      // GPUs nvidia-smi -L lists
	Nodes   []string // card device nodes, /dev/nvidiaN
	StandIn []string // the dry run's stand-in devices
}

func parseShown(out string) shown {
	var s shown
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "cuda GPU-"):
			s.CUDA = append(s.CUDA, strings.Fields(l)[1])
		case strings.HasPrefix(l, "smi GPU "):
			s.SMI++
		case strings.HasPrefix(l, "dev "):
			for _, n := range strings.Fields(l)[1:] {
				if d := strings.TrimPrefix(n, "/dev/nvidia"); d != n && d != "" && strings.Trim(d, "0123456789") == "" {
					s.Nodes = append(s.Nodes, n)
				}
			}
		case strings.HasPrefix(l, "env "+standInEnv+"="):
			s.StandIn = append(s.StandIn, strings.TrimPrefix(l, "env "+standInEnv+"="))
		}
	}
	return s
}

// everyCard says whether s shows every card of uuids (on the dry run: the
// stand-in "all" device).
func (s shown) everyCard(uuids []string, sim bool) bool {
	if sim {
		return slices.Contains(s.StandIn, "all")
	}
	got := slices.Sorted(slices.Values(s.CUDA))
	want := slices.Sorted(slices.Values(uuids))
	return slices.Equal(got, want) && s.SMI == len(uuids) && len(s.Nodes) == len(uuids)
}

// noCard says whether s shows no card at all.
func (s shown) noCard() bool {
	return len(s.CUDA) == 0 && s.SMI == 0 && len(s.Nodes) == 0 && len(s.StandIn) == 0
}

// toolkitProof is step 7: NVIDIA's container runtime, in cdi and jit-cdi
// mode, hands a container that asked for no GPU every card when it merely
// mounts host /dev/null under /var/run/nvidia-container-devices, and none
// without that mount. Each container is created by nvidia-container-runtime
// (which edits its OCI spec) and run by runc; inside, it reports the device
// nodes, the cards the driver API sees and nvidia-smi -L.
func (p *proof) toolkitProof(ctx context.Context) {
	r, o := p.r, p.o
	r.step(7, "NVIDIA's container runtime: a /dev/null mount under "+toolkitDeviceRoot+" is a request for every card")
	tools := map[string]*string{"--runc": &o.Runc, "--nvidia-runtime": &o.NvidiaRuntime, "--nvidia-ctk": &o.NvidiaCtk}
	for _, flag := range []string{"--runc", "--nvidia-runtime", "--nvidia-ctk"} {
		abs, err := absTool(*tools[flag])
		switch {
		case err == nil:
			*tools[flag] = abs
		case p.sim == nil:
			r.check(false, "%s found (%s: %v); hack/container-lane.sh builds NVIDIA's, Debian's runc package has runc", flag, *tools[flag], err)
			return
		case flag != "--nvidia-ctk": // the dry run needs no nvidia-ctk
			r.skipped("the dry run runs NVIDIA's runtime where it and runc are found (%s=%s: %v)", flag, *tools[flag], err)
			return
		}
	}
	if os.Geteuid() != 0 {
		if p.sim != nil {
			r.skipped("the containers need root (uid %d)", os.Geteuid())
			return
		}
		r.check(false, "running as root (uid %d)", os.Geteuid())
		return
	}
	work, err := os.MkdirTemp("", "gpu-proof-toolkit-")
	if !r.check(err == nil, "work directory (err %v)", err) {
		return
	}
	defer os.RemoveAll(work)
	specDir := filepath.Join(work, "cdi")
	other := filepath.Join(work, "not-dev-null")
	if err := errors.Join(os.MkdirAll(specDir, 0o755), os.WriteFile(other, nil, 0o644)); !r.check(err == nil, "spec directory (err %v)", err) {
		return
	}
	if !p.nvidiaSpec(ctx, specDir, o.NvidiaCtk) {
		return
	}
	uid := fmt.Sprintf("00000000-0000-4000-a000-%012d", os.Getpid())
	b, err := newBundle(ctx, o, filepath.Join(work, "bundle"), uid, fmt.Sprintf("%064x", os.Getpid()))
	if !r.check(err == nil, "container bundle (err %v)", err) {
		return
	}
	added, err := b.prepareFor(specDir, []string{nvidiaKind + "=all"})
	if !r.check(err == nil, "host libraries the driver's libraries need, copied into the root filesystem beforehand: %d (err %v)", len(added), err) {
		return
	}
	base := b.spec
	uuids := make([]string, 0, len(p.cards))
	for _, c := range p.cards {
		uuids = append(uuids, c.UUID)
	}
	for i, c := range mountCases(other) {
		if c.Mode == "jit-cdi" && p.sim != nil {
			r.skipped("%s, %s mode: the runtime makes the spec from the driver (NVML), which the dry run lacks", c.What, c.Mode)
			continue
		}
		b.spec = withMount(base, c.Source, c.Dest)
		b.spec.Linux.CgroupsPath = kubeletCgroupPath(o.Cgroup, uid, fmt.Sprintf("%064x", i+1))
		logPath := filepath.Join(work, fmt.Sprintf("runtime-%d.log", i))
		cfg := filepath.Join(work, fmt.Sprintf("config-%d.toml", i))
		if err := os.WriteFile(cfg, []byte(toolkitConfig(c.Mode, specDir, o.Runc, o.NvidiaCtk, logPath)), 0o644); err != nil {
			r.check(false, "runtime config %s (err %v)", cfg, err)
			return
		}
		out, err := b.runThrough(ctx, o.NvidiaRuntime, []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + cfg}, fmt.Sprintf("tk%d", i))
		r.info("%s, %s mode; the runtime logged: %s; inside:\n      %s", c.What, c.Mode, runtimeDecision(logPath), strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n      "))
		if !r.check(err == nil, "the container ran (err %v)", err) {
			continue
		}
		s := parseShown(string(out))
		every, seen := fmt.Sprintf("every card (%d)", len(uuids)), fmt.Sprintf("driver API %v, nvidia-smi %d, card nodes %v", s.CUDA, s.SMI, s.Nodes)
		if p.sim != nil {
			every, seen = nvidiaKind+"=all (the stand-in)", fmt.Sprintf("stand-in devices %v", s.StandIn)
		}
		if c.All {
			r.check(s.everyCard(uuids, p.sim != nil), "%s, %s mode: the toolkit hands the container %s: %s", c.What, c.Mode, every, seen)
		} else {
			r.check(s.noCard(), "%s, %s mode: the container gets no card: %s", c.What, c.Mode, seen)
		}
	}
}

func absTool(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// cloneSpec is a deep copy of spec.
func cloneSpec(spec *specs.Spec) *specs.Spec {
	raw, _ := json.Marshal(spec) // a spec from JSON marshals back
	c := &specs.Spec{}
	_ = json.Unmarshal(raw, c)
	return c
}

// withMount is a copy of spec with a bind mount of source at dest (none
// when source is empty), as the kubelet mounts a hostPath file.
func withMount(spec *specs.Spec, source, dest string) *specs.Spec {
	c := cloneSpec(spec)
	if source != "" {
		c.Mounts = append(c.Mounts, specs.Mount{Destination: dest, Type: "bind", Source: source, Options: []string{"rbind", "rprivate", "rw"}})
	}
	return c
}

// prepareFor copies into the root filesystem the host libraries that the
// libraries the CDI devices ids mount need, and sets PATH and
// LD_LIBRARY_PATH as if they were mounted, leaving the spec otherwise as it
// was: the runtime under test decides what is mounted.
func (b *bundle) prepareFor(specDir string, ids []string) ([]string, error) {
	base := cloneSpec(b.spec)
	if err := b.inject(specDir, ids); err != nil {
		return nil, err
	}
	added, err := b.addHostLibraries()
	env := slices.DeleteFunc(slices.Clone(b.spec.Process.Env), func(kv string) bool {
		return !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=")
	})
	b.spec = base
	b.spec.Process.Env = append(slices.DeleteFunc(b.spec.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }), env...)
	return added, err
}

// runThrough creates the container in the "show" role with runtime (which
// may edit the spec, as NVIDIA's does on create), starts it with runc,
// waits for it to stop and returns its output.
func (b *bundle) runThrough(ctx context.Context, runtime string, env []string, name string) ([]byte, error) {
	if err := b.configure("show"); err != nil {
		return nil, err
	}
	id := b.id + "-" + name
	outPath := filepath.Join(b.dir, id+".out")
	f, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = exec.Command(b.runc, "delete", "--force", id).Run() }()
	create := exec.CommandContext(ctx, runtime, "create", "--bundle", b.dir, id)
	create.Stdout, create.Stderr, create.Env = f, f, append(os.Environ(), env...)
	err = create.Run()
	f.Close()
	if err != nil {
		out, _ := os.ReadFile(outPath)
		return out, fmt.Errorf("%s create: %w", runtime, err)
	}
	if out, err := exec.CommandContext(ctx, b.runc, "start", id).CombinedOutput(); err != nil {
		return out, fmt.Errorf("runc start: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := exec.CommandContext(ctx, b.runc, "state", id).Output()
		var st specs.State
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		return err == nil && st.Status == specs.StateStopped, nil
	})
	out, _ := os.ReadFile(outPath)
	return out, err
}

// runtimeDecision is what NVIDIA's runtime logged about the devices it
// found requested, from its debug log.
func runtimeDecision(logPath string) string {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	var said []string
	for _, l := range strings.Split(string(raw), "\n") {
		for _, key := range []string{"No devices requested", "Creating CDI modifier for devices", "Generating in-memory CDI specs for devices", "level=error"} {
			if strings.Contains(l, key) {
				_, msg, _ := strings.Cut(l, "msg=")
				said = append(said, strconv.Quote(strings.Trim(msg, `"`)))
				break
			}
		}
	}
	if len(said) == 0 {
		return "nothing about devices"
	}
	return strings.Join(said, "; ")
}
