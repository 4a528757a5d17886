package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/kubeletnode"
)

// The container lane: a real kubelet and containerd, with NVIDIA's container
// runtime (CDI mode) deciding which device nodes a container gets, and
// gpushare's device plugin registered with that kubelet. What a container
// sees is read from the probe image's own output (docs/e2e.md).

const (
	probeImage = "gpushare.local/e2e/probe:v1"
	pauseImage = "gpushare.local/e2e/pause:v1"
	// laneGPUs are the lane node's simulated cards.
	laneGPUs = "2x40GiB:NVIDIA-A100"
)

// laneArtifacts are built once per run: the node program and the images.
var laneArtifacts struct {
	once             sync.Once
	err              error
	node             string
	probeTar, pauseT string
}

// needLane returns the lane's tools, or skips (fails under GPUSHARE_E2E=1)
// when one is missing: `make e2e` installs them (hack/container-lane.sh).
func needLane(t *testing.T) map[string]string {
	t.Helper()
	tools, missing := cluster.LaneBinaries()
	if len(missing) > 0 {
		msg := fmt.Sprintf("container lane: %s missing: run hack/container-lane.sh (make e2e does)", strings.Join(missing, ", "))
		if os.Getenv("GPUSHARE_E2E") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	laneArtifacts.once.Do(func() {
		a := &laneArtifacts
		a.node = filepath.Join(binDir, "gpushare-kubeletnode")
		if a.err = goBuild(a.node, "./kubeletnode/cmd"); a.err != nil {
			return
		}
		probe, pause := filepath.Join(binDir, "probe"), filepath.Join(binDir, "pause")
		for bin, pkg := range map[string]string{probe: "./kubeletnode/probe", pause: "./kubeletnode/pause"} {
			if a.err = cluster.BuildStatic(bin, pkg); a.err != nil {
				return
			}
		}
		a.probeTar, a.pauseT = filepath.Join(binDir, "probe.tar"), filepath.Join(binDir, "pause.tar")
		// The probe image sets NVIDIA_VISIBLE_DEVICES=all, as CUDA images do.
		if a.err = kubeletnode.WriteOCIArchive(a.probeTar, kubeletnode.Image{
			Name: probeImage, Files: map[string]string{"/probe": probe}, Entrypoint: []string{"/probe"},
			Env: []string{"PATH=/", api.EnvNvidiaVisibleDevices + "=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
		}); a.err != nil {
			return
		}
		a.err = kubeletnode.WriteOCIArchive(a.pauseT, kubeletnode.Image{
			Name: pauseImage, Files: map[string]string{"/pause": pause}, Entrypoint: []string{"/pause"},
		})
	})
	if laneArtifacts.err != nil {
		t.Fatal(laneArtifacts.err)
	}
	return tools
}

// laneNode starts a real node (containerd through the NVIDIA runtime, the
// kubelet, gpushare's plugin with laneGPUs and pluginArgs), waits until the
// kubelet offers the plugin's units, and stops it — after deleting ns's pods
// through the kubelet — when the test ends.
func laneNode(ctx context.Context, t *testing.T, c *cluster.Cluster, tools map[string]string, name string, pluginArgs ...string) (*cluster.KubeletNode, api.Inventory) {
	t.Helper()
	plugin := pluginBinary(t)
	start := time.Now()
	node, err := c.StartKubeletNode(cluster.KubeletNodeOptions{
		Name: name, Binary: laneArtifacts.node, Tools: tools,
		NvidiaRuntime: true, GPUs: laneGPUs,
		Images: []string{laneArtifacts.pauseT, laneArtifacts.probeTar}, PauseImage: pauseImage,
		Labels:       api.LabelEnabled + "=true",
		PluginBinary: plugin, PluginArgs: append([]string{"--nvml=spec:" + laneGPUs}, pluginArgs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node %s: %v", name, err)
		}
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	inv := waitLaneCapacity(ctx, t, c, node, time.Time{})
	t.Logf("node %s: kubelet offers %d units of %d cards after %v", name, inv.TotalUnits(), len(inv.Cards), time.Since(start).Round(time.Millisecond))
	return node, inv
}

// waitLaneCapacity waits until the Node carries the plugin's inventory and the
// kubelet's allocatable gpu-mem equals its units. The Node is not Ready (no
// CNI: the lane's pods use the host network), so readiness is not awaited.
//
// With since set, only a status the kubelet posted after since counts (its
// Ready condition's heartbeat, whole seconds): after a restart the Node may
// still show the old count while the kubelet has no healthy device yet.
func waitLaneCapacity(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, since time.Time) api.Inventory {
	t.Helper()
	var inv api.Inventory
	_, err := cluster.WaitNode(ctx, c.Client, node.Opts.Name, 3*time.Minute, "kubelet offering the plugin's units", func(n *corev1.Node) bool {
		if done, _ := node.Exited(); done {
			return true
		}
		if !since.IsZero() {
			posted := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.LastHeartbeatTime.After(since) {
					posted = true
				}
			}
			if !posted {
				return false
			}
		}
		got, err := api.DefaultNames().InventoryFromNode(n)
		q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		inv = got
		return err == nil && q.Value() == got.TotalUnits() && q.Value() > 0
	})
	if done, exitErr := node.Exited(); done {
		t.Fatalf("node program exited: %v\n%s", exitErr, node.Logs())
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, node.Logs())
	}
	checkKubeletSocketsInStateDir(t, node)
	return inv
}

// checkKubeletSocketsInStateDir: the kubelet's registration and PodResources
// sockets are in the node's state directory, which the node binds at the
// kubelet's paths. A kubelet that finds /var/lib/kubelet private bind-mounts
// it onto itself, hiding those binds: its sockets then land in the tmpfs
// below, and a pod's hostPath to pod-resources found the socket on some runs
// and an empty directory on others.
func checkKubeletSocketsInStateDir(t *testing.T, node *cluster.KubeletNode) {
	t.Helper()
	for _, sock := range []string{"device-plugins/kubelet.sock", "pod-resources/kubelet.sock"} {
		path := filepath.Join(node.StateDir, sock)
		if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("the kubelet's %s is not in the node's state directory (%v): the kubelet's paths no longer lead to the state directory's binds", path, err)
		}
	}
}

// probePod is a pod of probe containers on the host network (the lane has
// no CNI), tolerating the node's not-ready taints; units[i] > 0 asks for that
// much gpu-mem in container ci, 0 for none.
func probePod(ns, name string, units ...int64) *corev1.Pod {
	b := podtest.Make(ns, name)
	for i, u := range units {
		if u > 0 {
			b.GPU(fmt.Sprintf("c%d", i), u)
		} else {
			b.Container(fmt.Sprintf("c%d", i))
		}
	}
	pod := lanePod(b, probeImage)
	pod.Spec.HostNetwork, pod.Spec.DNSPolicy = true, corev1.DNSDefault
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
	}
	return pod
}

// runProbePod creates the pod and waits until every container runs.
func runProbePod(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.WaitPod(ctx, c.Client, pod.Namespace, pod.Name, 2*time.Minute, "Running, all containers started", func(p *corev1.Pod) bool {
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, node.Logs())
	}
	return got
}

// deletePods deletes the pods and waits until the kubelet has removed them.
func deletePods(ctx context.Context, t *testing.T, c *cluster.Cluster, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete pod %s: %v", p.Name, err)
		}
	}
	for _, p := range pods {
		if err := cluster.WaitPodGone(ctx, c.Client, p.Namespace, p.Name, time.Minute); err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
		}
	}
}

// probeSees waits for a report of the container printed after since and
// returns the latest.
func probeSees(ctx context.Context, t *testing.T, node *cluster.KubeletNode, pod *corev1.Pod, container string, since time.Time) kubeletnode.ProbeReport {
	t.Helper()
	var last cluster.ProbeLine
	var readErr error
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(context.Context) (bool, error) {
		lines, err := node.ProbeReports(pod.Namespace, pod.Name, pod.UID, container)
		readErr = err
		if err != nil || len(lines) == 0 {
			return false, nil
		}
		last = lines[len(lines)-1]
		return !last.Time.Before(since), nil
	})
	if err != nil {
		t.Fatalf("pod %s container %s: no probe report since %s (last %v at %s, read error %v)\n%s",
			pod.Name, container, since.Format(time.RFC3339Nano), last.Report, last.Time.Format(time.RFC3339Nano), readErr, node.Logs())
	}
	return last.Report
}

// cardDevice is the device node a container that got card index finds (the
// node's CDI spec: /dev/nvidia<index>, major 195, minor index).
func cardDevice(index int) kubeletnode.ProbeDevice {
	return kubeletnode.ProbeDevice{Path: "/dev/nvidia" + strconv.Itoa(index), Char: true, Major: 195, Minor: uint32(index)}
}

// nvidiactl comes with any card (the CDI spec's common edits).
var nvidiactl = kubeletnode.ProbeDevice{Path: kubeletnode.NvidiactlPath, Char: true, Major: 195, Minor: 255}

// devicesFor is what a container with the given cards must see, sorted as the
// probe lists them; nothing for no card.
func devicesFor(indexes ...int) []kubeletnode.ProbeDevice {
	out := []kubeletnode.ProbeDevice{}
	for _, i := range indexes {
		out = append(out, cardDevice(i))
	}
	if len(indexes) > 0 {
		out = append(out, nvidiactl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// allocatedAssignment waits until the pod's record holds its cards
// (api.HeldPhase: Allocated, or Assigned once the kubelet started the pod)
// and returns it.
func allocatedAssignment(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) api.Assignment {
	t.Helper()
	var asg api.Assignment
	var lastErr error
	if _, err := cluster.WaitPod(ctx, c.Client, pod.Namespace, pod.Name, recordSettle, "assignment Allocated", func(p *corev1.Pod) bool {
		asg, lastErr = api.DefaultNames().AssignmentFromPod(p)
		return lastErr == nil && api.HeldPhase(p, asg) == api.PhaseAllocated
	}); err != nil {
		t.Fatalf("%v (last decode error: %v)", err, lastErr)
	}
	return asg
}

// checkContainerSeesItsCard checks a GPU container's own view: exactly the
// assigned card's device node (and nvidiactl), one device request — the card's
// UUID — and the env the plugin promises.
func checkContainerSeesItsCard(t *testing.T, pod *corev1.Pod, ca api.ContainerAssignment, asg api.Assignment, seen kubeletnode.ProbeReport) {
	t.Helper()
	if diff := cmp.Diff(devicesFor(ca.CardIndex), seen.Devices); diff != "" {
		t.Errorf("pod %s container %s (card %d %s): device nodes (-want +seen):\n%s", pod.Name, ca.Name, ca.CardIndex, ca.CardUUID, diff)
	}
	if diff := cmp.Diff([]string{ca.CardUUID}, seen.DeviceRequests); diff != "" {
		t.Errorf("pod %s container %s: %s entries (-want +seen):\n%s", pod.Name, ca.Name, api.VisibleDevicesVolumeRoot, diff)
	}
	wantEnv := map[string]string{
		api.EnvNvidiaVisibleDevices: api.VisibleDevicesVolumeRoot,
		api.EnvCardUUID:             ca.CardUUID,
		api.EnvCardIndex:            strconv.Itoa(ca.CardIndex),
		api.EnvMemoryUnits:          strconv.FormatInt(ca.Units, 10),
		api.EnvMemoryUnit:           string(asg.Unit),
	}
	for k, v := range wantEnv {
		if seen.Env[k] != v {
			t.Errorf("pod %s container %s: env %s=%q, want %q", pod.Name, ca.Name, k, seen.Env[k], v)
		}
	}
}

// checkContainerSeesNoCard checks a container that asked for nothing: no
// device node, no device request, none of the plugin's env — while its image
// says NVIDIA_VISIBLE_DEVICES=all.
func checkContainerSeesNoCard(t *testing.T, pod *corev1.Pod, container string, seen kubeletnode.ProbeReport) {
	t.Helper()
	if got := seen.Env[api.EnvNvidiaVisibleDevices]; got != "all" {
		t.Errorf("pod %s container %s: env %s=%q, want the image's \"all\" (the premise of this check)", pod.Name, container, api.EnvNvidiaVisibleDevices, got)
	}
	if len(seen.Devices) != 0 {
		t.Errorf("pod %s container %s asked for no GPU but sees device nodes %v", pod.Name, container, seen.Devices)
	}
	if len(seen.DeviceRequests) != 0 {
		t.Errorf("pod %s container %s asked for no GPU but has %s entries %v", pod.Name, container, api.VisibleDevicesVolumeRoot, seen.DeviceRequests)
	}
	if v, ok := seen.Env[api.EnvCardUUID]; ok {
		t.Errorf("pod %s container %s asked for no GPU but has %s=%s", pod.Name, container, api.EnvCardUUID, v)
	}
}

// setToolkit changes a setting in the node's NVIDIA runtime config with
// nvidia-ctk, as an operator would; the runtime reads it at the next create.
func setToolkit(t *testing.T, tools map[string]string, node *cluster.KubeletNode, setting string, value bool) {
	t.Helper()
	cmd := exec.Command(tools["nvidia-ctk"], "config", "--config-file", node.ToolkitConfig(), "--in-place",
		"--set", fmt.Sprintf("%s=%t", setting, value))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nvidia-ctk config --set %s=%t: %v\n%s", setting, value, err, out)
	}
	b, err := os.ReadFile(node.ToolkitConfig())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s = %t", setting, value); !strings.Contains(string(b), want) || !strings.Contains(string(b), `mode = "cdi"`) {
		t.Fatalf("after nvidia-ctk, %s lacks %q or CDI mode:\n%s", node.ToolkitConfig(), want, b)
	}
}

// TestContainerLane runs the issue-14 scenarios on one real node, in order:
// what each container sees is decided by the real kubelet, containerd, runc
// and NVIDIA's runtime from gpushare's Allocate answer.
func TestContainerLane(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	tools := needLane(t)
	ctx := context.Background()
	node, inv := laneNode(ctx, t, c, tools, "gpu-kubelet-1")
	if len(inv.Cards) != 2 {
		t.Fatalf("inventory has %d cards, want 2 (%s)", len(inv.Cards), laneGPUs)
	}
	ns := testNamespace(ctx, t, c, "lane")

	t.Run("GPU pod sees exactly its assigned card, its device request and env", func(t *testing.T) {
		pod := runProbePod(ctx, t, c, node, probePod(ns, "one-card", 30))
		defer deletePods(ctx, t, c, pod)
		asg := allocatedAssignment(ctx, t, c, pod)
		ca, ok := asg.Container("c0")
		if !ok {
			t.Fatalf("no assignment for c0: %+v", asg)
		}
		checkContainerSeesItsCard(t, pod, ca, asg, probeSees(ctx, t, node, pod, "c0", time.Time{}))
	})

	t.Run("pod without a request whose image sets NVIDIA_VISIBLE_DEVICES=all sees no GPU", func(t *testing.T) {
		pod := runProbePod(ctx, t, c, node, probePod(ns, "no-request", 0))
		defer deletePods(ctx, t, c, pod)
		checkContainerSeesNoCard(t, pod, "c0", probeSees(ctx, t, node, pod, "c0", time.Time{}))
	})

	t.Run("the same pod sees every card when the toolkit accepts the env var from unprivileged containers", func(t *testing.T) {
		setToolkit(t, tools, node, kubeletnode.SettingEnvvarUnprivileged, true)
		defer setToolkit(t, tools, node, kubeletnode.SettingEnvvarUnprivileged, false)
		pod := runProbePod(ctx, t, c, node, probePod(ns, "no-request-accepted", 0))
		defer deletePods(ctx, t, c, pod)
		seen := probeSees(ctx, t, node, pod, "c0", time.Time{})
		if diff := cmp.Diff(devicesFor(0, 1), seen.Devices); diff != "" {
			t.Errorf("with %s=true an unprivileged pod with NVIDIA_VISIBLE_DEVICES=all should see every card (-want +seen):\n%s", kubeletnode.SettingEnvvarUnprivileged, diff)
		}
	})

	t.Run("the toolkit's own mount rule: refused by the chart's policy, and every card without it", func(t *testing.T) {
		// A pod that asks for no GPU and mounts the host's /dev/null at
		// /var/run/nvidia-container-devices/all: NVIDIA's runtime reads it as
		// a request for every card (requestsFromMounts).
		attack := func(ns, name string) *corev1.Pod {
			pod := probePod(ns, name, 0)
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/null"}}})
			pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "all", MountPath: api.VisibleDevicesVolumeRoot + "/all"})
			return pod
		}
		system, guarded := testNamespace(ctx, t, c, "gpushare-system"), testNamespace(ctx, t, c, "lane-guarded")
		applyAdmissionPolicySubset(ctx, t, c, system, []string{"gpushare-device-access"})
		enforceAdmission(ctx, t, c, system, guarded)
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = c.Client.CoreV1().Pods(guarded).Create(ctx, attack(guarded, "all-cards"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last != nil, nil
		}); err != nil {
			t.Fatalf("the pod as written was admitted under the chart's device-access policy; want it refused")
		}
		wantError(t, "", last, "container c0 mounts a volume at /var/run/nvidia-container-devices/all", "ask for example.com/gpu-mem")

		// The same pod where the policy does not apply: the real toolkit
		// hands it every card, so the refusal above is what protects them.
		pod := runProbePod(ctx, t, c, node, attack(ns, "all-cards-unguarded"))
		defer deletePods(ctx, t, c, pod)
		seen := probeSees(ctx, t, node, pod, "c0", time.Time{})
		if diff := cmp.Diff(devicesFor(0, 1), seen.Devices); diff != "" {
			t.Errorf("without the policy, the pod mounting /dev/null at %s/all should see every card (the premise of the policy) (-want +seen):\n%s", api.VisibleDevicesVolumeRoot, diff)
		}
	})

	t.Run("the device plugin's own pod, as the chart renders it, sees every card and the kubelet's sockets unprivileged, with no capability", func(t *testing.T) {
		chartPod := chartPluginPod(ctx, t, ns, "plugin-pod", node.Opts.Name)
		createChartSecrets(ctx, t, c.Client, chartPod)
		pod := runProbePod(ctx, t, c, node, chartPod)
		defer deletePods(ctx, t, c, pod)
		// Each plugin container: the plugin, and its standby where the chart runs one.
		for i, ctr := range pod.Spec.Containers {
			t.Logf("container %s", ctr.Name)
			checkPluginPodLeastPrivilege(t, pod, i, probeSees(ctx, t, node, pod, ctr.Name, time.Time{}))
		}

		// Without its "all" device request the same unprivileged pod sees no
		// card: the request, not a privilege, is what gives NVML the cards.
		bare := chartPluginPod(ctx, t, ns, "plugin-pod-no-request", node.Opts.Name)
		for i := range bare.Spec.Containers {
			ctr := &bare.Spec.Containers[i]
			mounts := ctr.VolumeMounts[:0]
			for _, m := range ctr.VolumeMounts {
				if !strings.HasPrefix(m.MountPath, api.VisibleDevicesVolumeRoot) {
					mounts = append(mounts, m)
				}
			}
			ctr.VolumeMounts = mounts
		}
		bare = runProbePod(ctx, t, c, node, bare)
		defer deletePods(ctx, t, c, bare)
		for _, ctr := range bare.Spec.Containers {
			if seen := probeSees(ctx, t, node, bare, ctr.Name, time.Time{}); len(seen.Devices) != 0 {
				t.Errorf("the plugin pod's %s without its device request sees %v; want no card", ctr.Name, seen.Devices)
			}
		}
	})

	t.Run("multi-container pod: each container its own card, the one without a request none", func(t *testing.T) {
		pod := runProbePod(ctx, t, c, node, probePod(ns, "multi", 30, 30, 0))
		defer deletePods(ctx, t, c, pod)
		asg := allocatedAssignment(ctx, t, c, pod)
		c0, ok0 := asg.Container("c0")
		c1, ok1 := asg.Container("c1")
		if !ok0 || !ok1 {
			t.Fatalf("assignment lacks c0 or c1: %+v", asg)
		}
		if c0.CardUUID == c1.CardUUID {
			t.Fatalf("30+30 GiB on 2x40 GiB: both containers assigned card %s", c0.CardUUID)
		}
		checkContainerSeesItsCard(t, pod, c0, asg, probeSees(ctx, t, node, pod, "c0", time.Time{}))
		checkContainerSeesItsCard(t, pod, c1, asg, probeSees(ctx, t, node, pod, "c1", time.Time{}))
		checkContainerSeesNoCard(t, pod, "c2", probeSees(ctx, t, node, pod, "c2", time.Time{}))
	})

	// Restarts: a running GPU pod keeps its devices (same container, a report
	// printed after the restart), and the next pod gets its assigned card.
	restart := func(t *testing.T, what string, pid func() int, prefix string) {
		before := runProbePod(ctx, t, c, node, probePod(ns, prefix+"-before", 20))
		defer deletePods(ctx, t, c, before)
		asgBefore := allocatedAssignment(ctx, t, c, before)
		caBefore, _ := asgBefore.Container("c0")
		checkContainerSeesItsCard(t, before, caBefore, asgBefore, probeSees(ctx, t, node, before, "c0", time.Time{}))

		old, regs := pid(), node.Registrations()
		if err := cluster.Signal(old, syscall.SIGTERM); err != nil {
			t.Fatalf("stop the %s: %v", what, err)
		}
		// The node program starts it again; the plugin registers again with
		// the kubelet (after a kubelet restart: with the new kubelet).
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 2*time.Minute, true, func(context.Context) (bool, error) {
			return pid() != 0 && pid() != old && node.Registrations() > regs, nil
		}); err != nil {
			t.Fatalf("%s not restarted and plugin not registered again (pid %d → %d, registrations %d → %d): %v\n%s",
				what, old, pid(), regs, node.Registrations(), err, node.Logs())
		}
		restarted := time.Now()
		waitLaneCapacity(ctx, t, c, node, restarted)
		t.Logf("%s restarted (pid %d → %d); plugin registered again; the kubelet posted full capacity %v later", what, old, pid(), time.Since(restarted).Round(time.Millisecond))

		// The running container: same container, no restart, still its card.
		fresh, err := c.Client.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fresh.Status.ContainerStatuses[0].ContainerID, before.Status.ContainerStatuses[0].ContainerID; got != want || fresh.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: container %s (restarts %d), before the %s restart %s", before.Name, got, fresh.Status.ContainerStatuses[0].RestartCount, what, want)
		}
		checkContainerSeesItsCard(t, before, caBefore, asgBefore, probeSees(ctx, t, node, before, "c0", restarted))

		after := runProbePod(ctx, t, c, node, probePod(ns, prefix+"-after", 20))
		defer deletePods(ctx, t, c, after)
		asgAfter := allocatedAssignment(ctx, t, c, after)
		caAfter, _ := asgAfter.Container("c0")
		checkContainerSeesItsCard(t, after, caAfter, asgAfter, probeSees(ctx, t, node, after, "c0", time.Time{}))
	}

	t.Run("kubelet restart: running containers keep their devices, the next pod gets its card", func(t *testing.T) {
		restart(t, "kubelet", node.KubeletPID, "kubelet-restart")
	})

	t.Run("device plugin restart under the real kubelet: running containers keep their devices, the next pod gets its card", func(t *testing.T) {
		restart(t, "device plugin", node.PluginPID, "plugin-restart")
	})
}
