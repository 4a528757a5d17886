package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/dra"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/kubeletnode"
)

// The DRA lane: the container lane's real node, with containerd 2 (which
// applies the CDI devices the kubelet names for a container's claims) and
// gpushare's node agent as a DRA driver registered with that kubelet. What a
// container sees is read from the probe's output, as in the container lane
// (docs/e2e.md, docs/dra.md).

// draLaneGPUs is the DRA lane node's one simulated card: every claim lands on
// it, so what is left of it is known at each step.
const draLaneGPUs = "1x40GiB:NVIDIA-A100"

// oneByteOver10Gi asks for one byte more than 10Gi: the device's request
// policy rounds it up to the next whole unit, 11Gi.
const oneByteOver10Gi = "10737418241"

// needDRALane returns the container lane's tools with containerd 2's
// containerd, shim and ctr in place of Debian's, or skips (fails under
// GPUSHARE_E2E=1) when they are missing.
func needDRALane(t *testing.T) map[string]string {
	t.Helper()
	tools := needLane(t)
	cd2, missing := cluster.Containerd2Binaries()
	if len(missing) > 0 {
		msg := fmt.Sprintf("DRA lane: containerd %s's %s missing in %s: run LANE_CONTAINERD2=1 hack/container-lane.sh (make e2e-dra-lane does)",
			cluster.ContainerdVersion, strings.Join(missing, ", "), cluster.Containerd2BinDir())
		if os.Getenv("GPUSHARE_E2E") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	merged := map[string]string{}
	for k, v := range tools {
		merged[k] = v
	}
	for k, v := range cd2 {
		merged[k] = v
	}
	return merged
}

// draLaneNode starts a real node whose containerd 2 reads the claims' CDI
// specs from the driver's --dra-cdi-dir (returned) beside the NVIDIA spec of
// its cards, runs gpushare's node agent in DRA mode (naming each card's
// device of that NVIDIA spec, for the runtime in CDI mode), and waits for the
// driver's ResourceSlice.
func draLaneNode(ctx context.Context, t *testing.T, c *cluster.Cluster, tools map[string]string, name string) (*cluster.KubeletNode, *resourceapi.ResourceSlice, string) {
	t.Helper()
	cdiDir := filepath.Join(c.NodeStateDir(name), "dra-cdi")
	start := time.Now()
	node, err := c.StartKubeletNode(cluster.KubeletNodeOptions{
		Name: name, Binary: laneArtifacts.node, Tools: tools,
		NvidiaRuntime: true, GPUs: draLaneGPUs, CDISpecDirs: []string{cdiDir},
		Images: []string{laneArtifacts.pauseT, laneArtifacts.probeTar}, PauseImage: pauseImage,
		PluginBinary: pluginBinary(t),
		PluginArgs: []string{"--nvml=spec:" + draLaneGPUs, "--dra", "--dra-cdi-dir", cdiDir,
			"--dra-nvidia-cdi-kind", "nvidia.com/gpu"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node %s: %v", name, err)
		}
		bg := context.Background()
		_ = c.Client.CoreV1().Nodes().Delete(bg, name, metav1.DeleteOptions{})
		_ = c.Client.ResourceV1().ResourceSlices().DeleteCollection(bg, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	})
	slice := waitDRASlice(ctx, t, c, node, "the driver's slice", func(*resourceapi.ResourceSlice) bool { return true })
	t.Logf("node %s: the driver's slice %s after %v", name, slice.Name, time.Since(start).Round(time.Millisecond))
	return node, slice, cdiDir
}

// waitDRASlice waits until the node's slice of the driver has one device,
// card-0, and satisfies cond.
func waitDRASlice(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, what string, cond func(*resourceapi.ResourceSlice) bool) *resourceapi.ResourceSlice {
	t.Helper()
	var got *resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, _ := node.Exited(); done {
			return false, fmt.Errorf("node program exited")
		}
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Opts.Name})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			s := &list.Items[i]
			if s.Spec.Driver == draDriver && len(s.Spec.Devices) == 1 && s.Spec.Devices[0].Name == "card-0" && cond(s) {
				got = s
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, node.Logs())
	}
	return got
}

// draProbePod is a probe pod for the lane node whose container c0 uses claim.
func draProbePod(ns, name, claim, node string) *corev1.Pod {
	pod := probePod(ns, name, 0)
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	return pod
}

// createClaimPod creates a claim for memory and a probe pod using it.
func createClaimPod(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, ns, name, memory string) *corev1.Pod {
	t.Helper()
	if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, name, memory), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return draProbePod(ns, name, name, node.Opts.Name)
}

// runClaimPod creates a claim for memory and a probe pod using it, and waits
// until the pod runs.
func runClaimPod(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, ns, name, memory string) *corev1.Pod {
	t.Helper()
	return runProbePod(ctx, t, c, node, createClaimPod(ctx, t, c, node, ns, name, memory))
}

// deleteClaimPods deletes the pods and then their claims (named as the pods),
// waiting until each is gone: the claim's memory is then free.
func deleteClaimPods(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", name, err)
		}
	}
	for _, name := range names {
		if err := cluster.WaitPodGone(ctx, c.Client, ns, name, time.Minute); err != nil {
			t.Errorf("pod %s: %v", name, err)
		}
		if err := c.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete claim %s: %v", name, err)
		}
	}
	for _, name := range names {
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("claim %s not gone: %v", name, err)
		}
	}
}

// claimUID is the UID of the claim of that name.
func claimUID(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) types.UID {
	t.Helper()
	cl, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cl.UID
}

// claimSpecs lists the CDI spec files in dir naming the claim's UID (the
// driver writes one per prepared claim).
func claimSpecs(t *testing.T, dir string, claim types.UID) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+string(claim)+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// waitClaimSpecsGone waits until no CDI spec of the claims is left in dir
// (NodeUnprepareResources removed them).
func waitClaimSpecsGone(ctx context.Context, t *testing.T, node *cluster.KubeletNode, dir string, claims ...types.UID) {
	t.Helper()
	var left []string
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(context.Context) (bool, error) {
		left = nil
		for _, uid := range claims {
			left = append(left, claimSpecs(t, dir, uid)...)
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Errorf("CDI specs of unprepared claims left: %v\n%s", left, node.Logs())
	}
}

// checkClaimContainer checks a claim's container from inside: exactly the
// card's device nodes from NVIDIA's CDI spec (card 0 and nvidiactl), one device
// request naming the card, and the grant's environment from the claim's CDI
// spec — the card's UUID and the memory the claim consumed.
func checkClaimContainer(t *testing.T, pod *corev1.Pod, uuid string, gib int64, seen kubeletnode.ProbeReport) {
	t.Helper()
	if diff := cmp.Diff(devicesFor(0), seen.Devices); diff != "" {
		t.Errorf("pod %s (claim of %dGi): device nodes (-want +seen):\n%s", pod.Name, gib, diff)
	}
	if diff := cmp.Diff([]string{uuid}, seen.DeviceRequests); diff != "" {
		t.Errorf("pod %s: %s entries (-want +seen):\n%s", pod.Name, api.VisibleDevicesVolumeRoot, diff)
	}
	want := map[string]string{
		api.EnvNvidiaVisibleDevices: api.VisibleDevicesVolumeRoot,
		api.EnvCardUUID:             uuid,
		api.EnvCardIndex:            "0",
		api.EnvMemoryUnits:          strconv.FormatInt(gib, 10),
		api.EnvMemoryUnit:           string(api.UnitGiB),
		api.EnvMemoryMiB:            strconv.FormatInt(gib*1024, 10),
	}
	got := map[string]string{}
	for k := range want {
		got[k] = seen.Env[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod %s (claim of %dGi): env (-want +seen):\n%s", pod.Name, gib, diff)
	}
}

// TestDRALane is `make e2e-dra-lane`, not part of `make test`: gpushare's DRA
// driver on a real kubelet with containerd 2 and NVIDIA's runtime in CDI mode.
// Claims of 10Gi and 20Gi share the node's one 40Gi card and their pods run,
// each container seeing exactly that card and its own grant; a claim of 50Gi
// waits with the allocator's reason. After a kubelet restart and after the
// driver is killed and restarted, the running containers keep their devices
// and the accounting is the same: a claim of the 10Gi left runs, one of a
// byte more waits. Deleting the pods unprepares their claims (the CDI specs
// go) and gives the whole card back.
func TestDRALane(t *testing.T) {
	if os.Getenv("GPUSHARE_E2E_DRA_LANE") != "1" {
		t.Skip("the DRA lane: make e2e-dra-lane")
	}
	c := setup(t)
	needRoot(t)
	tools := needDRALane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ns := testNamespace(ctx, t, c, "dra-lane")
	applyDeviceClass(ctx, t, c, ns)

	node, slice, cdiDir := draLaneNode(ctx, t, c, tools, "dra-kubelet-1")
	uuid := ""
	if a, ok := slice.Spec.Devices[0].Attributes[dra.AttributeUUID]; ok && a.StringValue != nil {
		uuid = *a.StringValue
	}
	if memory := slice.Spec.Devices[0].Capacity[dra.CapacityMemory].Value; uuid == "" || memory.String() != "40Gi" {
		t.Fatalf("card-0: uuid %q, memory %s; want a UUID and 40Gi", uuid, memory.String())
	}

	ten := runClaimPod(ctx, t, c, node, ns, "ten", "10Gi")
	twenty := runClaimPod(ctx, t, c, node, ns, "twenty", "20Gi")
	held := []types.UID{claimUID(ctx, t, c, ns, "ten"), claimUID(ctx, t, c, ns, "twenty")}
	t.Run("claims of 10Gi and 20Gi share the card, each container sees the card and its own grant", func(t *testing.T) {
		checkClaimContainer(t, ten, uuid, 10, probeSees(ctx, t, node, ten, "c0", time.Time{}))
		checkClaimContainer(t, twenty, uuid, 20, probeSees(ctx, t, node, twenty, "c0", time.Time{}))
		for i, uid := range held {
			if specs := claimSpecs(t, cdiDir, uid); len(specs) != 1 {
				t.Errorf("claim %d (%s): CDI specs %v in %s, want one", i, uid, specs, cdiDir)
			}
		}
	})

	t.Run("a claim that fits no card waits with the allocator's reason", func(t *testing.T) {
		pod := createClaimPod(ctx, t, c, node, ns, "fifty", "50Gi")
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer deleteClaimPods(ctx, t, c, ns, "fifty")
		if msg := waitUnschedulable(ctx, t, c, ns, "fifty"); !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("the 50Gi pod waits with %q, want the DRA allocator's reason", msg)
		}
	})

	// After a restart: the running containers are the same, still see their
	// card; 10Gi is left, so a claim of 10Gi runs and one of a byte more waits.
	restart := func(t *testing.T, what string, pid func() int, sig syscall.Signal, prefix string, newSlice bool) {
		before := draSlice(ctx, t, c, node.Opts.Name)
		old, driver := pid(), node.PluginPID()
		if err := cluster.Signal(old, sig); err != nil {
			t.Fatalf("stop the %s: %v", what, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 2*time.Minute, true, func(context.Context) (bool, error) {
			return pid() != 0 && pid() != old, nil
		}); err != nil {
			t.Fatalf("%s not restarted (pid %d → %d): %v\n%s", what, old, pid(), err, node.Logs())
		}
		restarted := time.Now()
		if what == "driver" {
			driver = pid()
		}
		// The kubelet deletes its node's slices when it starts; the driver
		// publishes its slice again. A driver restart keeps the slice.
		after := waitDRASlice(ctx, t, c, node, "the driver's slice after the "+what+" restart", func(s *resourceapi.ResourceSlice) bool {
			return (s.UID != before.UID) == newSlice
		})
		t.Logf("%s restarted (pid %d → %d); slice %s (before %s) %v after the restart", what, old, pid(), after.Name, before.Name, time.Since(restarted).Round(100*time.Millisecond))

		for _, p := range []*corev1.Pod{ten, twenty} {
			fresh, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fresh.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].ContainerID; got != want || fresh.Status.ContainerStatuses[0].RestartCount != 0 || !cluster.PodRunning(fresh) {
				t.Errorf("pod %s: %s, container %s (restarts %d); before the %s restart Running, %s", p.Name, fresh.Status.Phase, got, fresh.Status.ContainerStatuses[0].RestartCount, what, want)
			}
		}
		checkClaimContainer(t, ten, uuid, 10, probeSees(ctx, t, node, ten, "c0", restarted))
		checkClaimContainer(t, twenty, uuid, 20, probeSees(ctx, t, node, twenty, "c0", restarted))

		rest := runClaimPod(ctx, t, c, node, ns, prefix+"-rest", "10Gi")
		restUID := claimUID(ctx, t, c, ns, rest.Name)
		checkClaimContainer(t, rest, uuid, 10, probeSees(ctx, t, node, rest, "c0", time.Time{}))
		over := createClaimPod(ctx, t, c, node, ns, prefix+"-over", oneByteOver10Gi)
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, over, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if msg := waitUnschedulable(ctx, t, c, ns, over.Name); !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("the pod asking for a byte more than the 10Gi left waits with %q, want the DRA allocator's reason", msg)
		}
		deleteClaimPods(ctx, t, c, ns, over.Name, rest.Name)
		waitClaimSpecsGone(ctx, t, node, cdiDir, restUID)
		// The driver serving since the restart (or, for a kubelet restart,
		// since before it) is still the one serving now.
		if now := node.PluginPID(); now != driver {
			log, _ := os.ReadFile(node.PluginLog())
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			t.Errorf("the driver exited during the %s restart subtest (pid %d, now %d); its log ends:\n%s", what, driver, now, log)
		}
	}

	t.Run("kubelet restart: running containers keep their card, the slice's accounting is unchanged", func(t *testing.T) {
		restart(t, "kubelet", node.KubeletPID, syscall.SIGTERM, "kubelet-restart", true)
	})

	t.Run("driver killed and restarted: running containers keep their card, the slice's accounting is unchanged", func(t *testing.T) {
		restart(t, "driver", node.PluginPID, syscall.SIGKILL, "driver-restart", false)
	})

	t.Run("deleting the pods unprepares their claims and returns the whole card", func(t *testing.T) {
		deleteClaimPods(ctx, t, c, ns, ten.Name, twenty.Name)
		waitClaimSpecsGone(ctx, t, node, cdiDir, held...)
		whole := runClaimPod(ctx, t, c, node, ns, "whole", "40Gi")
		wholeUID := claimUID(ctx, t, c, ns, whole.Name)
		checkClaimContainer(t, whole, uuid, 40, probeSees(ctx, t, node, whole, "c0", time.Time{}))
		deleteClaimPods(ctx, t, c, ns, whole.Name)
		waitClaimSpecsGone(ctx, t, node, cdiDir, wholeUID)
	})
}
