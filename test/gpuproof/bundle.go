package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpushare/gpushare/test/gpuproof/cuda"
)

// bundle is an OCI bundle that runs this program in a container: a root
// filesystem holding it and the libraries it links, and the spec `runc
// spec` writes, put in a kubelet-shaped cgroup.
type bundle struct {
	dir, id string
	runc    string
	sim     bool
	spec    *specs.Spec
}

// newBundle makes the bundle in dir for pod UID uid and container ID cid.
func newBundle(ctx context.Context, o options, dir, uid, cid string) (*bundle, error) {
	root := filepath.Join(dir, "rootfs")
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := copyWithLibraries(self, "/gpu-proof", root); err != nil {
		return nil, err
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "etc", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	if out, err := exec.CommandContext(ctx, o.Runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s spec: %v: %s", o.Runc, err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	b := &bundle{dir: dir, id: "gpu-proof-" + cid[:12], runc: o.Runc, spec: &specs.Spec{}}
	if err := json.Unmarshal(raw, b.spec); err != nil {
		return nil, err
	}
	b.spec.Root = &specs.Root{Path: "rootfs"} // writable: NVIDIA's hooks write the loader cache
	b.spec.Process.Terminal = false
	b.spec.Process.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	b.spec.Linux.CgroupsPath = kubeletCgroupPath(o.Cgroup, uid, cid)
	return b, nil
}

// kubeletCgroupPath is the cgroup the kubelet (systemd driver on cgroup v2,
// cgroupfs on v1) and containerd give the container.
func kubeletCgroupPath(mount, uid, cid string) string {
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		u := strings.ReplaceAll(uid, "-", "_")
		return "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice/cri-containerd-" + cid + ".scope"
	}
	return "/kubepods/besteffort/pod" + uid + "/" + cid
}

// inject applies the CDI devices ids from the specs in dir to the bundle's
// spec with the CDI library, and points the loader at the libraries they
// mount.
func (b *bundle) inject(dir string, ids []string) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		return fmt.Errorf("CDI specs: %v", errs)
	}
	if unresolved, err := cache.InjectDevices(b.spec, ids...); err != nil {
		return fmt.Errorf("%w (unresolved %v)", err, unresolved)
	}
	var dirs []string
	for _, m := range b.spec.Mounts {
		if strings.Contains(filepath.Base(m.Destination), ".so") && !slices.Contains(dirs, filepath.Dir(m.Destination)) {
			dirs = append(dirs, filepath.Dir(m.Destination))
		}
	}
	if len(dirs) > 0 {
		b.spec.Process.Env = append(b.spec.Process.Env, "LD_LIBRARY_PATH="+strings.Join(dirs, ":"))
	}
	return nil
}

// sonameLinks does what the loader-cache hook's ldconfig would: a link
// named after each mounted library's SONAME, in the root filesystem.
func (b *bundle) sonameLinks() ([]string, error) {
	var made []string
	for _, m := range b.spec.Mounts {
		if !strings.Contains(filepath.Base(m.Destination), ".so.") {
			continue
		}
		f, err := elf.Open(m.Source)
		if err != nil {
			continue
		}
		names, _ := f.DynString(elf.DT_SONAME)
		f.Close()
		if len(names) == 0 || names[0] == filepath.Base(m.Destination) {
			continue
		}
		link := filepath.Join(b.dir, "rootfs", filepath.Dir(m.Destination), names[0])
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return made, err
		}
		if err := os.Symlink(filepath.Base(m.Destination), link); err != nil && !errors.Is(err, os.ErrExist) {
			return made, err
		}
		made = append(made, filepath.Join(filepath.Dir(m.Destination), names[0]))
	}
	return made, nil
}

func (b *bundle) deviceNodes() []string {
	var out []string
	for _, d := range b.spec.Linux.Devices {
		out = append(out, d.Path)
	}
	return out
}

func (b *bundle) hooks() int {
	if b.spec.Hooks == nil {
		return 0
	}
	h := b.spec.Hooks
	return len(h.Prestart) + len(h.CreateRuntime) + len(h.CreateContainer) + len(h.StartContainer) + len(h.Poststart) + len(h.Poststop)
}

// configure writes the spec to run this program in role with args.
func (b *bundle) configure(role string, args ...string) error {
	b.spec.Process.Args = append([]string{"/gpu-proof"}, args...)
	env := slices.DeleteFunc(slices.Clone(b.spec.Process.Env), func(kv string) bool { return strings.HasPrefix(kv, roleEnv+"=") })
	b.spec.Process.Env = append(env, roleEnv+"="+role)
	raw, err := json.MarshalIndent(b.spec, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "config.json"), raw, 0o644)
}

// run runs the container in role to its end and returns its output.
func (b *bundle) run(ctx context.Context, role string, args []string) ([]byte, error) {
	if err := b.configure(role, args...); err != nil {
		return nil, err
	}
	id := b.id + "-" + role
	defer func() { _ = exec.Command(b.runc, "delete", "--force", id).Run() }()
	return exec.CommandContext(ctx, b.runc, "run", "--bundle", b.dir, id).CombinedOutput()
}

// start runs the container as the holding helper, its PID the container's
// process as the host sees it.
func (b *bundle) start(ctx context.Context) (*helper, error) {
	args := []string{"--card", "0"} // the container sees one card
	if b.sim {
		args = append(args, "--sim")
	}
	if err := b.configure("hold", args...); err != nil {
		return nil, err
	}
	id := b.id + "-hold"
	h, err := startHelperCmd(exec.Command(b.runc, "run", "--bundle", b.dir, id))
	if err != nil {
		_ = exec.Command(b.runc, "delete", "--force", id).Run()
		return nil, err
	}
	out, err := exec.CommandContext(ctx, b.runc, "state", id).Output()
	var st specs.State
	if err == nil {
		err = json.Unmarshal(out, &st)
	}
	if err != nil || st.Pid == 0 {
		h.close()
		return nil, fmt.Errorf("runc state %s: %v (%s)", id, err, out)
	}
	h.PID = st.Pid
	h.cleanup = func() { _ = exec.Command(b.runc, "delete", "--force", id).Run() }
	return h, nil
}

// copyWithLibraries copies the executable src to dst under root, with its
// program interpreter and every shared library it needs, at their paths.
func copyWithLibraries(src, dst, root string) error {
	if err := copyFile(src, filepath.Join(root, dst), 0o755); err != nil {
		return err
	}
	_, err := copyNeeded(root, []string{src}, nil)
	return err
}

// copyNeeded copies into root, at their host paths, the interpreter and
// shared libraries the ELF files need, and theirs, except those provided
// names (by file name). It returns the paths copied.
func copyNeeded(root string, files []string, provided map[string]bool) ([]string, error) {
	seen := map[string]bool{}
	var copied []string
	queue := slices.Clone(files)
	for len(queue) > 0 {
		f, err := elf.Open(queue[0])
		queue = queue[1:]
		if err != nil {
			continue // not an ELF file (a script): nothing to link
		}
		var need []string
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(p.Open())
				need = append(need, strings.TrimRight(string(b), "\x00"))
			}
		}
		libs, _ := f.ImportedLibraries()
		f.Close()
		for _, l := range append(need, libs...) {
			if provided[filepath.Base(l)] {
				continue
			}
			path, err := findLibrary(l)
			if err != nil {
				return copied, err
			}
			if seen[path] {
				continue
			}
			seen[path] = true
			if err := copyFile(path, filepath.Join(root, path), 0o755); err != nil {
				return copied, err
			}
			copied = append(copied, path)
			queue = append(queue, path)
		}
	}
	return copied, nil
}

// addHostLibraries copies into the root filesystem the host libraries the
// libraries CDI mounts need (the C library's parts a full image would have),
// and puts the mounted programs' directories on PATH.
func (b *bundle) addHostLibraries() ([]string, error) {
	provided := map[string]bool{}
	var libs []string
	for _, m := range b.spec.Mounts {
		base := filepath.Base(m.Destination)
		provided[base] = true
		if strings.Contains(base, ".so") {
			libs = append(libs, m.Source)
			if f, err := elf.Open(m.Source); err == nil {
				if names, _ := f.DynString(elf.DT_SONAME); len(names) > 0 {
					provided[names[0]] = true
				}
				f.Close()
			}
		}
		if filepath.Base(filepath.Dir(m.Destination)) == "bin" {
			libs = append(libs, m.Source)
			for i, kv := range b.spec.Process.Env {
				if strings.HasPrefix(kv, "PATH=") && !strings.Contains(kv, filepath.Dir(m.Destination)) {
					b.spec.Process.Env[i] = "PATH=" + filepath.Dir(m.Destination) + ":" + strings.TrimPrefix(kv, "PATH=")
				}
			}
		}
	}
	return copyNeeded(filepath.Join(b.dir, "rootfs"), libs, provided)
}

func findLibrary(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name), nil
		}
	}
	return "", fmt.Errorf("shared library %s not found", name)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src) // follows links: the file itself
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// showCUDA prints the cards the driver API sees: "cuda UUID NAME" each.
func showCUDA() {
	if err := cuda.Open(); err != nil {
		fmt.Printf("cuda unavailable: %v\n", errors.Unwrap(err))
		return
	}
	devs, err := cuda.Devices()
	if err != nil {
		fmt.Printf("cuda devices: %v\n", err)
		return
	}
	for _, d := range devs {
		fmt.Printf("cuda %s %s\n", d.UUID, d.Name)
	}
}
