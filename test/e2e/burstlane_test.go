package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/burstbench"
	"github.com/gpushare/gpushare/test/cluster"
)

// TestBurstBenchOnARealKubelet is `make bench-burst-lane`, not part of
// `make test`: `make bench-burst`'s bursts (the device floor too) on the container lane's
// real node (kubelet, containerd, runc through NVIDIA's runtime, gpushare's
// plugin serving 2×40 GiB) — pods without a request alone, GPU pods of 4 GiB
// alone, both interleaved — with the figures per kind, create → bound →
// Ready, and the verdict (burstbench.Judge): it fails unless every pod is
// Ready and the GPU and mixed p90s are within the target of the no-GPU-alone
// p90 (over GPUSHARE_BENCH_ROUNDS suites, by each ratio's median: burstbench.JudgeRounds).
// GPUSHARE_BENCH_PODS (default 15 a burst; the lane's kubelet runs
// at most 30 pods, maxPods) and GPUSHARE_BENCH_PLUGIN_ARGS (space-separated
// plugin flags, e.g. "--kube-api-qps=5 --kube-api-burst=10" for client-go's
// old budget) vary it.
func TestBurstBenchOnARealKubelet(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH_BURST_LANE") != "1" {
		t.Skip("a benchmark: make bench-burst-lane")
	}
	c := setup(t)
	tools := needLane(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	node, _ := laneNode(ctx, t, c, tools, "burst-kubelet", strings.Fields(os.Getenv("GPUSHARE_BENCH_PLUGIN_ARGS"))...)
	o := laneBurstOptions(t, 4)
	laneFloor(ctx, t, c, &o, node)
	runLaneSuite(ctx, t, c, o, node.LogFile())
}

// TestBurstBenchDRAOnARealKubelet is the DRA variant of
// TestBurstBenchOnARealKubelet (`make bench-burst-lane`): on the DRA lane's
// real node (containerd 2 applying the claims' CDI devices, gpushare's node
// agent as the DRA driver of one 40 GiB card), the GPU pods each have a
// claim of 2Gi of the gpushare DeviceClass's memory (from a
// ResourceClaimTemplate), placed by kube-scheduler's own DRA allocator; the
// same three bursts and the same verdict. Its floor is DRA's
// (burstbench.DRAFloor): claims of the same shape from a do-nothing DRA driver.
func TestBurstBenchDRAOnARealKubelet(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH_BURST_LANE") != "1" || os.Getenv("GPUSHARE_E2E_DRA_LANE") != "1" {
		t.Skip("a benchmark: make bench-burst-lane (with the DRA lane)")
	}
	c := setup(t)
	needRoot(t)
	tools := needDRALane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	applyDeviceClass(ctx, t, c, testNamespace(ctx, t, c, "dra-burst-class"))
	node, _, _ := draLaneNode(ctx, t, c, tools, "dra-burst-kubelet")
	o := laneBurstOptions(t, 2)
	// The floor is DRA's: claims of the same shape from a do-nothing DRA driver.
	stop, err := burstbench.DRAFloor{Node: node.Opts.Name, RegistryDir: filepath.Join(node.StateDir, "plugins_registry"),
		PluginDir: filepath.Join(node.StateDir, "dra-floor"), GiB: 40}.Start(ctx, c.Client, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	o.FloorResource = "example.com/dra-floor" // only marks the floor's pods: each gets a claim instead
	o.FloorWhat = fmt.Sprintf("a claim of %d GiB of a DRA driver that does nothing (DeviceClass %s)", o.GiB, burstbench.DRAFloorDriver)
	adapt := o.Pod
	const template, floorTemplate = "gpu-mem", "floor"
	o.Prepare = func(ctx context.Context, client kubernetes.Interface, ns string) error {
		claim := memoryClaim(ns, template, fmt.Sprintf("%dGi", o.GiB))
		for name, spec := range map[string]resourceapi.ResourceClaimSpec{template: claim.Spec, floorTemplate: burstbench.FloorClaim(o.GiB)} {
			if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	o.Pod = func(p *corev1.Pod) {
		adapt(p)
		c0 := &p.Spec.Containers[0]
		name := ""
		if _, gpu := c0.Resources.Limits[api.DefaultNames().ResourceName()]; gpu {
			name = template
		} else if _, floor := c0.Resources.Limits[o.FloorResource]; floor {
			name = floorTemplate
		}
		if name == "" {
			return
		}
		c0.Resources.Limits = nil
		c0.Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(name)}}
	}
	runLaneSuite(ctx, t, c, o, node.LogFile())
}

// laneFloor serves the device floor on the lane's node (a device plugin
// that does nothing, burstbench.ServeFloorPlugins) and has the suite time
// it: pods asking as much of it, which the kubelet and containerd run as
// they run pods without a request, through the same device manager.
func laneFloor(ctx context.Context, t *testing.T, c *cluster.Cluster, o *burstbench.Options, node *cluster.KubeletNode) {
	t.Helper()
	const res = "example.com/burst-floor"
	stop, err := burstbench.StartFloor(ctx, c.Client, res, []burstbench.FloorNode{{Name: node.Opts.Name, Dir: filepath.Join(node.StateDir, "device-plugins"), Devices: 80}}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	o.FloorResource = res
}

// laneBurstOptions are the lane's burst settings: GPUSHARE_BENCH_PODS a
// kind (default 15), gib GiB each, pods that run on the lane's node.
func laneBurstOptions(t *testing.T, gib int64) burstbench.Options {
	t.Helper()
	o := burstbench.DefaultOptions()
	o.Pods, o.GiB = 15, gib
	if v := os.Getenv("GPUSHARE_BENCH_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("GPUSHARE_BENCH_PODS=%q: want a positive number", v)
		}
		o.Pods = n
	}
	// The suite's kube-scheduler has one profile (the extender's, called only
	// for pods that ask for its resources): both kinds use it.
	o.GPUScheduler, o.PlainScheduler = schedulerName, schedulerName
	o.Timeout = 4 * time.Minute
	o.Log = t.Logf
	o.Pod = func(p *corev1.Pod) {
		// The lane's node has no pod network and pulls nothing.
		p.Spec.HostNetwork, p.Spec.DNSPolicy = true, corev1.DNSDefault
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Image, p.Spec.Containers[i].ImagePullPolicy = pauseImage, corev1.PullNever
		}
	}
	return o
}

// runLaneSuite runs the three bursts, prints the figures and fails unless
// the target is met.
func runLaneSuite(ctx context.Context, t *testing.T, c *cluster.Cluster, o burstbench.Options, nodeLog string) {
	t.Helper()
	cfg := *c.RESTConfig
	cfg.QPS, cfg.Burst = -1, 0 // the burst is the cluster's to absorb
	client, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	rounds := 1
	if v := os.Getenv("GPUSHARE_BENCH_ROUNDS"); v != "" {
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("GPUSHARE_BENCH_ROUNDS=%q: want a positive number", v)
		}
	}
	var all [][]burstbench.Result
	met := false
	for i := range rounds {
		fmt.Printf("\n=== round %d of %d\n", i+1, rounds)
		results := burstbench.RunSuite(ctx, client, o)
		met = burstbench.WriteSuite(os.Stdout, o, results)
		for _, r := range results {
			for name, tl := range r.Pods {
				if tl.Failed {
					t.Errorf("%s burst: %s Failed: %s", r.Mix, name, tl.FailedReason)
				}
			}
			if r.Err != nil {
				t.Errorf("%s burst: %v", r.Mix, r.Err)
			}
		}
		all = append(all, results)
	}
	if rounds > 1 {
		met = burstbench.WriteRounds(os.Stdout, all)
	}
	if !met {
		t.Errorf("target not met (figures above); kubelet node log: %s", nodeLog)
	}
}
