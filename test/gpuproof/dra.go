package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/dra"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/deviceplugin/usage"
)

// nvidiaKind is the CDI kind of NVIDIA's spec (nvidia-ctk cdi generate).
const nvidiaKind = "nvidia.com/gpu"

// draProof is step 6: the node agent in DRA mode on the real card. The
// driver publishes the card as a shareable device, prepares a claim
// allocated on it (a CDI spec), and a container is started the way a
// runtime with CDI starts it (containerd 2: the CDI library injects the
// claim's devices into the OCI spec, runc runs it) in a cgroup shaped like
// the kubelet's. Inside, the driver API sees exactly the claim's card and
// the environment names the grant; outside, the usage sampler measures the
// container against its claim and kill enforcement stops it once it holds
// more.
func (p *proof) draProof(ctx context.Context) {
	r, o := p.r, p.o
	r.step(6, fmt.Sprintf("DRA: a claim of %d GiB on card %d, its container started through CDI (runc), measured against the claim", o.ClaimGiB, o.Card))
	card := p.cards[o.Card]
	names := api.DefaultNames()
	var dev *resourceapi.Device
	devices := dra.Devices(names, p.store.Inventory(), nil)
	for i := range devices {
		if devices[i].Name == api.DRADeviceName(card.Index) {
			dev = &devices[i]
		}
	}
	if !r.check(dev != nil, "the slice offers card %d as %s (devices %d)", card.Index, api.DRADeviceName(card.Index), len(devices)) {
		return
	}
	mem := dev.Capacity[dra.CapacityMemory].Value
	r.check(mem.Value() == api.UnitGiB.UnitsFromMiB(card.MemoryMiB)<<30 && *dev.Attributes[dra.AttributeUUID].StringValue == card.UUID && dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations,
		"%s: uuid %s, model %q, memory %s, shareable", dev.Name, *dev.Attributes[dra.AttributeUUID].StringValue, *dev.Attributes[dra.AttributeModel].StringValue, mem.String())

	work, err := os.MkdirTemp("", "gpu-proof-dra-")
	if !r.check(err == nil, "work directory (err %v)", err) {
		return
	}
	defer os.RemoveAll(work)
	cdiDir := filepath.Join(work, "cdi")
	driver := &dra.Driver{Name: names.DRADriver(), Pool: "gpu-proof", Store: p.store, CDIDir: cdiDir, NvidiaCDIKind: nvidiaKind,
		Grant: response.Config{Names: names, Strategy: response.StrategyVolumeMounts, DeviceIDStrategy: response.DeviceIDUUID}}
	pod, claim := proofPodAndClaim(driver, dev.Name, o.ClaimGiB)
	prepared, err := driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	res := prepared[claim.UID]
	if !r.check(err == nil && res.Err == nil && len(res.Devices) == 1, "NodePrepareResources: %+v (err %v)", res, err) {
		return
	}
	ids := res.Devices[0].CDIDeviceIDs
	r.info("CDI devices of the claim: %s", strings.Join(ids, ", "))
	defer func() {
		unprep, err := driver.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: claim.UID}})
		files, _ := filepath.Glob(filepath.Join(cdiDir, "gpushare*"))
		r.check(err == nil && unprep[claim.UID] == nil && len(files) == 0, "NodeUnprepareResources removes the claim's CDI spec (left %v, err %v %v)", files, err, unprep[claim.UID])
	}()

	if _, err := exec.LookPath(o.Runc); err != nil || os.Geteuid() != 0 {
		if p.sim != nil {
			r.skipped("the container needs root and runc (--runc=%s: %v; uid %d)", o.Runc, err, os.Geteuid())
			return
		}
		r.check(false, "runc found (--runc=%s: %v) and running as root (uid %d)", o.Runc, err, os.Geteuid())
		return
	}
	if !p.nvidiaSpec(ctx, cdiDir, o.NvidiaCtk) {
		return
	}
	b, err := newBundle(ctx, o, filepath.Join(work, "bundle"), string(pod.UID), containerID(pod))
	if b != nil {
		b.sim = p.sim != nil
	}
	if !r.check(err == nil, "container bundle: root filesystem of this program and its libraries, `runc spec` (err %v)", err) {
		return
	}
	if err := b.inject(cdiDir, ids); !r.check(err == nil, "the CDI library injects %s into the OCI spec, as containerd 2 does (err %v)", strings.Join(ids, ", "), err) {
		return
	}
	r.info("OCI spec after CDI: %d device nodes %v, %d mounts, %d hooks", len(b.spec.Linux.Devices), b.deviceNodes(), len(b.spec.Mounts), b.hooks())
	added, err := b.addHostLibraries()
	if !r.check(err == nil, "host libraries the mounted ones need, copied into the root filesystem: %v (err %v)", added, err) {
		return
	}
	if !o.NvidiaHooks {
		links, err := b.sonameLinks()
		r.info("without NVIDIA's hooks, library links made in the root filesystem: %v (err %v)", links, err)
	}

	// What the container sees.
	out, err := b.run(ctx, "show", nil)
	r.info("inside the container:\n      %s", strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n      "))
	if !r.check(err == nil, "the container ran (err %v)", err) {
		return
	}
	env := string(out)
	r.check(strings.Contains(env, "env GPUSHARE_CARD_UUID="+card.UUID+"\n") && strings.Contains(env, fmt.Sprintf("env GPUSHARE_MEMORY_MIB=%d\n", o.ClaimGiB<<10)),
		"its environment names the claim's card %s and %d MiB", card.UUID, o.ClaimGiB<<10)
	if p.sim == nil {
		r.check(strings.Count(env, "\ncuda ") == 1 && strings.Contains(env, "\ncuda "+card.UUID+" "), "the driver API in the container sees exactly one card, the claim's")
		r.check(strings.Contains(env, "smi GPU 0:") && strings.Contains(env, card.UUID) && !strings.Contains(env, "smi GPU 1:"), "nvidia-smi -L in the container lists the claim's card only")
	}
	p.draEnforce(ctx, b, pod, claim, driver.Name)
}

// draEnforce runs the helper in the container and measures it against the
// claim through the sampler's claim grants, then kills it over its claim.
func (p *proof) draEnforce(ctx context.Context, b *bundle, pod *corev1.Pod, claim *resourceapi.ResourceClaim, driver string) {
	r, o := p.r, p.o
	h, err := b.start(ctx)
	if !r.check(err == nil, "the helper runs in the container (err %v)", err) {
		return
	}
	defer h.close()
	r.info("helper: %s (host pid %d)", h.Ready, h.PID)
	p.setSim(h.PID, simContextMiB)
	g := &dra.ClaimGrants{Driver: driver, Pool: "gpu-proof", Cards: p.store.Cards,
		Get: func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return claim, nil }}
	s := &usage.Sampler{NVML: p.lib, Cards: p.store.Cards, Unit: api.UnitGiB, Proc: o.Proc, Clock: time.Now,
		Pods: func() ([]*corev1.Pod, error) { return []*corev1.Pod{pod}, nil }, Claims: g.Grants}
	base, ok := p.helperUsage(ctx, s, h.PID, "context only")
	if !ok {
		return
	}
	r.check(base.Ref.UID == pod.UID && base.Grant && base.GrantedBytes == o.ClaimGiB<<30, "attributed to the claim's pod %s with a grant of %d GiB (got %s, grant %v, %d bytes)", pod.UID, o.ClaimGiB, base.Ref, base.Grant, base.GrantedBytes)
	e := &usage.Enforcer{Mode: usage.ModeKill, Actions: &proofActions{kill: usage.KubeActions{Proc: o.Proc, Signal: usage.SignalKill}, r: r}, Log: klog.Background()}
	sample, err := s.Sweep(ctx)
	r.check(err == nil && len(e.Observe(ctx, sample)) == 0, "within its claim (%d MiB used): left alone (err %v)", base.UsedBytes>>20, err)
	reply, err := h.do(fmt.Sprintf("alloc %d", o.HoldMiB))
	if !r.check(err == nil && strings.HasPrefix(reply, "ok "), "cuMemAlloc(%d MiB) in the container: %s (err %v)", o.HoldMiB, reply, err) {
		return
	}
	p.setSim(h.PID, simContextMiB+o.HoldMiB)
	sample, err = s.Sweep(ctx)
	acted := e.Observe(ctx, sample)
	r.check(err == nil && len(acted) == 1 && containsPID(acted[0].Usage.PIDs, h.PID), "over its %d GiB claim the enforcer kills the container's process (acted on %v, err %v)", o.ClaimGiB, pidsOf(acted), err)
	how, err := h.wait(15 * time.Second)
	r.check(err == nil, "the container ended: %s (err %v)", how, err)
	if p.sim != nil {
		p.sim.SetProcesses(o.Card, nil, nil)
	}
}

// proofPodAndClaim are a pod and its claim of gib GiB, allocated on device
// by the scheduler and reserved for the pod.
func proofPodAndClaim(d *dra.Driver, device string, gib int64) (*corev1.Pod, *resourceapi.ResourceClaim) {
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-9000-%012d", os.Getpid()))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-proof", Name: "claimant", UID: uid}}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptrTo("claimant-gpu")}}
	pod.Spec.Containers = []corev1.Container{{Name: "cuda", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "cuda", ContainerID: "containerd://" + containerID(pod)}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-proof", Name: "claimant-gpu", UID: types.UID("claim-" + string(uid))}}
	// The request the allocation names, as the user wrote it: the driver
	// prepares only an allocation the claim asked for.
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: d.Name,
		Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)}},
	}}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: d.Name, Pool: d.Pool, Device: device,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)},
	}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	return pod, claim
}

func ptrTo[T any](v T) *T { return &v }

// containerID is the pod's container ID (64 hex digits, as containerd's).
func containerID(pod *corev1.Pod) string {
	return fmt.Sprintf("%064x", []byte(strings.ReplaceAll(string(pod.UID), "-", ""))[:32])
}

// nvidiaSpec writes NVIDIA's CDI spec into dir: generated by nvidia-ctk
// (ctk, which its hooks name) on a real card, a stand-in on the dry run.
func (p *proof) nvidiaSpec(ctx context.Context, dir, ctk string) bool {
	r, o := p.r, p.o
	if p.sim != nil {
		r.info("dry run: no NVIDIA CDI spec (nvidia-ctk needs the driver); a stand-in names %s=%s and %s=all, each only setting %s", nvidiaKind, p.cards[o.Card].UUID, nvidiaKind, standInEnv)
		err := writeStandInSpec(dir, p.cards[o.Card].UUID)
		return r.check(err == nil, "stand-in NVIDIA spec (err %v)", err)
	}
	args := []string{"cdi", "generate", "--output", filepath.Join(dir, "nvidia.yaml"), "--nvidia-cdi-hook-path", ctk}
	if !o.NvidiaHooks {
		args = append(args, "--disable-hook", "all")
	}
	out, err := exec.CommandContext(ctx, ctk, args...).CombinedOutput()
	return r.check(err == nil, "nvidia-ctk cdi generate (%v): %s", err, lastLines(string(out), 3))
}

// standInEnv is what the dry run's stand-in NVIDIA devices set in a
// container: the device's name.
const standInEnv = "NVIDIA_STAND_IN"

// writeStandInSpec writes an NVIDIA-kind spec naming the card and "all",
// each with no edit but an environment variable naming it, for the dry run.
func writeStandInSpec(dir, uuid string) error {
	var devices []any
	for _, name := range []string{uuid, "all"} {
		devices = append(devices, map[string]any{"name": name, "containerEdits": map[string]any{"env": []string{standInEnv + "=" + name}}})
	}
	spec := map[string]any{"cdiVersion": "0.5.0", "kind": nvidiaKind, "devices": devices}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "nvidia.json"), b, 0o644)
}

// showMain is the container's "show" role: the environment gpushare and
// NVIDIA set, the NVIDIA device nodes, the cards the driver API sees, and
// nvidia-smi -L when the runtime mounted it.
func showMain() int {
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		if strings.HasPrefix(kv, "GPUSHARE_") || strings.HasPrefix(kv, "NVIDIA_") {
			fmt.Println("env " + kv)
		}
	}
	nodes, _ := filepath.Glob("/dev/nvidia*")
	fmt.Println("dev " + strings.Join(nodes, " "))
	showCUDA()
	if out, err := exec.Command("nvidia-smi", "-L").CombinedOutput(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fmt.Println("smi " + l)
		}
	} else {
		fmt.Printf("smi unavailable: %v\n", err)
	}
	return 0
}
