package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

// gpuProcs plays the GPU processes of the node's containers: for every
// container a pod's api.Names.AnnotationSimulatedGPUUse names, one real process
// (sleep) inside a cgroup named like the kubelet's cgroupfs driver makes it,
// <root>/kubepods/burstable/pod<uid>/<container ID>, so that the device
// plugin's /proc/<pid>/cgroup mapping is the real one; and the simulated
// NVML's process file (nvml.SimProcesses) lists each live process with its
// memory on its card. A process that exits (killed by the plugin, or its pod
// deleted) leaves the file.
type gpuProcs struct {
	file string // the simulated NVML's process file
	root string // the cgroup directory holding kubepods/

	mu    sync.Mutex
	procs map[int]gpuProc
}

type gpuProc struct {
	pod  types.UID
	card int
	mib  uint64
	cmd  *exec.Cmd
}

// newGPUProcs picks a writable cgroup hierarchy: cgroup v2's unified root,
// else v1's cpu (or pids) hierarchy; under it a directory for this node.
func newGPUProcs(file, node string) (*gpuProcs, error) {
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err != nil {
		found := false
		for _, c := range []string{"cpu", "pids", "memory"} {
			if _, err := os.Stat(filepath.Join(base, c, "cgroup.procs")); err == nil {
				base, found = filepath.Join(base, c), true
				break
			}
		}
		if !found {
			return nil, errors.New("no writable cgroup hierarchy under /sys/fs/cgroup")
		}
	}
	g := &gpuProcs{file: file, root: filepath.Join(base, "gpushare-e2e-"+node), procs: map[int]gpuProc{}}
	return g, g.writeLocked()
}

// simContainerID is the container ID the agent reports for a container (a
// runtime's 64 hex digits, from the pod UID and the container's name).
func simContainerID(pod *corev1.Pod, name string) string {
	h := sha256.Sum256([]byte(string(pod.UID) + "/" + name))
	return hex.EncodeToString(h[:])
}

type gpuUse struct {
	container string
	mib       uint64
	card      int // -1: the container's own card
	// ignoreTERM: the process ignores SIGTERM (a container that traps it),
	// so only the grace period's end (SIGKILL) stops it.
	ignoreTERM bool
}

// ignoreSIGTERM, at the end of an item of AnnotationSimulatedGPUUse, makes
// the container's process ignore SIGTERM ("c0=6144+ignore-sigterm").
const ignoreSIGTERM = "+ignore-sigterm"

func parseGPUUse(s string) ([]gpuUse, error) {
	var out []gpuUse
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		item, ignoreTERM := strings.CutSuffix(item, ignoreSIGTERM)
		name, rest, ok := strings.Cut(item, "=")
		mibS, cardS, onCard := strings.Cut(rest, "@")
		mib, err := strconv.ParseUint(mibS, 10, 64)
		if !ok || err != nil || name == "" {
			return nil, fmt.Errorf("%s %q: want container=MiB[@cardIndex][%s]", api.DefaultNames().AnnotationSimulatedGPUUse(), item, ignoreSIGTERM)
		}
		u := gpuUse{container: name, mib: mib, card: -1, ignoreTERM: ignoreTERM}
		if onCard {
			if u.card, err = strconv.Atoi(cardS); err != nil || u.card < 0 {
				return nil, fmt.Errorf("%s %q: card index %q", api.DefaultNames().AnnotationSimulatedGPUUse(), item, cardS)
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// startPod starts the pod's GPU processes. cardOf gives a container's card
// index from the devices the device manager gave it (-1: none).
func (a *Agent) startGPUProcesses(ctx context.Context, pod *corev1.Pod, cardOf func(container string) int) error {
	s, ok := pod.Annotations[api.DefaultNames().AnnotationSimulatedGPUUse()]
	if !ok || a.gpu == nil {
		return nil
	}
	uses, err := parseGPUUse(s)
	if err != nil {
		return err
	}
	for _, u := range uses {
		card := u.card
		if card < 0 {
			card = cardOf(u.container)
		}
		if card < 0 {
			return fmt.Errorf("%s: container %s has no card; name one with @cardIndex", api.DefaultNames().AnnotationSimulatedGPUUse(), u.container)
		}
		pid, err := a.gpu.start(pod, u.container, card, u.mib, u.ignoreTERM)
		if err != nil {
			return err
		}
		klog.FromContext(ctx).Info("GPU process started", "pod", klog.KObj(pod), "container", u.container, "pid", pid, "card", card, "usedMiB", u.mib)
	}
	return nil
}

func (g *gpuProcs) start(pod *corev1.Pod, container string, card int, mib uint64, ignoreTERM bool) (int, error) {
	dir := filepath.Join(g.root, "kubepods", "burstable", "pod"+string(pod.UID), simContainerID(pod, container))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	cmd := exec.Command("sleep", "infinity")
	if ignoreTERM {
		// An ignored signal stays ignored across exec: sleep keeps sh's PID.
		cmd = exec.Command("sh", "-c", "trap '' TERM; exec sleep infinity")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, fmt.Errorf("moving pid %d into %s: %w", pid, dir, err)
	}
	g.mu.Lock()
	g.procs[pid] = gpuProc{pod: pod.UID, card: card, mib: mib, cmd: cmd}
	err := g.writeLocked()
	g.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		g.mu.Lock()
		delete(g.procs, pid)
		_ = g.writeLocked()
		g.mu.Unlock()
	}()
	return pid, err
}

// terminatePod sends SIGTERM to the pod's processes (the start of a
// graceful stop) and reports whether any still runs.
func (g *gpuProcs) terminatePod(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	running := false
	for _, p := range g.procs {
		if p.pod == uid {
			running = true
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	return running
}

// stopPod kills the pod's processes (its containers stop).
func (g *gpuProcs) stopPod(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		if p.pod == uid {
			_ = p.cmd.Process.Kill()
		}
	}
}

// stopAll kills every process and removes the node's cgroups (leaves first).
func (g *gpuProcs) stopAll() {
	g.mu.Lock()
	var cmds []*exec.Cmd
	for _, p := range g.procs {
		_ = p.cmd.Process.Kill()
		cmds = append(cmds, p.cmd)
	}
	g.mu.Unlock()
	for _, c := range cmds {
		_, _ = c.Process.Wait()
	}
	var dirs []string
	_ = filepath.WalkDir(g.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

func (g *gpuProcs) writeLocked() error {
	f := nvml.SimProcesses{}
	for pid, p := range g.procs {
		k := strconv.Itoa(p.card)
		f[k] = append(f[k], nvml.SimProcess{PID: uint32(pid), UsedMiB: p.mib})
	}
	for _, l := range f {
		sort.Slice(l, func(i, j int) bool { return l[i].PID < l[j].PID })
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp := g.file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, g.file)
}

// cardIndexes maps the node's card UUIDs to indexes, from its inventory.
func (a *Agent) cardIndexes(ctx context.Context) map[string]int {
	out := map[string]int{}
	n, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return out
	}
	inv, err := api.DefaultNames().InventoryFromNode(n)
	if err != nil {
		return out
	}
	for _, c := range inv.Cards {
		out[c.UUID] = c.Index
	}
	return out
}
