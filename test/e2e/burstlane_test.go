package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/test/burstbench"
)

// TestBurstBenchOnARealKubelet is `make bench-burst-lane`, not part of
// `make test`: `make bench-burst`'s burst on the container lane's real node
// (kubelet, containerd, runc through NVIDIA's runtime, gpushare's plugin
// serving 2×40 GiB) — pods without a request and GPU pods of 4 GiB,
// interleaved, created at once — and the figures per kind, create → bound →
// Ready. It fails only if a pod fails or the burst does not settle; the
// figures are printed, not judged. GPUSHARE_BENCH_PODS (default 15 of each
// kind: the lane's kubelet runs at most 30 pods, maxPods) and GPUSHARE_BENCH_PLUGIN_ARGS
// (space-separated plugin flags, e.g. "--kube-api-qps=5 --kube-api-burst=10"
// for client-go's old budget) vary it.
func TestBurstBenchOnARealKubelet(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH_BURST_LANE") != "1" {
		t.Skip("a benchmark: make bench-burst-lane")
	}
	c := setup(t)
	tools := needLane(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	node, _ := laneNode(ctx, t, c, tools, "burst-kubelet", strings.Fields(os.Getenv("GPUSHARE_BENCH_PLUGIN_ARGS"))...)

	o := burstbench.DefaultOptions()
	o.Pods = 15
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
	o.Timeout = 5 * time.Minute
	o.Log = t.Logf
	o.Pod = func(p *corev1.Pod) {
		// The lane's node has no pod network and pulls nothing.
		p.Spec.HostNetwork, p.Spec.DNSPolicy = true, corev1.DNSDefault
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Image, p.Spec.Containers[i].ImagePullPolicy = pauseImage, corev1.PullNever
		}
	}
	cfg := *c.RESTConfig
	cfg.QPS, cfg.Burst = -1, 0 // the burst is the cluster's to absorb
	client, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := burstbench.Run(ctx, client, o)
	burstbench.WriteReport(os.Stdout, o, burstbench.Summarize(pods))
	for name, tl := range pods {
		if tl.Failed {
			t.Errorf("%s Failed: %s", name, tl.FailedReason)
		}
	}
	if err != nil {
		t.Fatalf("%v\nkubelet node log: %s", err, node.LogFile())
	}
}
