package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// draScheduler starts a kube-scheduler with the chart's dedicated-mode
// configuration for schedulerName (dra.enabled, dra.scoring.enabled as
// scoring), its extender URL pointed at the suite's extender.
func draScheduler(ctx context.Context, t *testing.T, ns, schedulerName string, scoring bool) {
	t.Helper()
	c := setup(t)
	out := renderChart(ctx, t, ns, "templates/scheduler-configmap.yaml", "--set", "dra.enabled=true",
		"--set", fmt.Sprintf("dra.scoring.enabled=%t", scoring), "--set", "scheduler.schedulerName="+schedulerName)
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatalf("the chart's scheduler ConfigMap: %v\n%s", err, out)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "leaderElection") // StartScheduler sets it
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := strings.ReplaceAll(string(b), "http://127.0.0.1:39999", fmt.Sprintf("http://127.0.0.1:%d", extenderPort))
	if scoring != strings.Contains(config, "dra/prioritize") {
		t.Fatalf("the chart's configuration with dra.scoring.enabled=%t:\n%s", scoring, config)
	}
	sched, err := c.StartScheduler("kube-scheduler-"+schedulerName, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sched.Stop() })
}

// Node scores for claims, end to end: two DRA nodes with one 40Gi card
// each; dra-s1's card has 30Gi claimed by a pod that also requests 8 of its
// 16 CPUs. A 10Gi claim fills dra-s1's card exactly, which the extender's
// DRA verb scores best; kube-scheduler's own scores prefer the less
// requested dra-s2. Scheduled by the chart's configuration without DRA
// scoring (the control) the pod goes to dra-s2; with it, to dra-s1.
func TestDRAScoringPacksClaimsOntoTheFragPreferredNode(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := testNamespace(ctx, t, c, "dra-score")
	applyDeviceClass(ctx, t, c, ns)
	draScheduler(ctx, t, ns, "gpushare-dra-plain", false)
	draScheduler(ctx, t, ns, "gpushare-dra-scored", true)
	for _, n := range []string{"dra-s1", "dra-s2"} {
		draNode(ctx, t, c, n, "1x40GiB:NVIDIA-A100")
		patch := []byte(`{"metadata":{"labels":{"e2e-dra-score":"true"}}}`)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, "big", "30Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	big := claimPod(ns, "big", "big", "dra-s1")
	big.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitScheduled(ctx, t, c, ns, "big", "dra-s1")

	place := func(name, scheduler string) string {
		t.Helper()
		if _, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, memoryClaim(ns, name, "10Gi"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := claimPod(ns, name, name, "")
		p.Spec.SchedulerName = scheduler
		p.Spec.NodeSelector = map[string]string{"e2e-dra-score": "true"}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var node string
		for ctx.Err() == nil && node == "" {
			got, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node = got.Spec.NodeName
			time.Sleep(200 * time.Millisecond)
		}
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		return node
	}
	if got := place("plain", "gpushare-dra-plain"); got != "dra-s2" {
		t.Fatalf("without DRA scoring the 10Gi claim's pod went to %q, want dra-s2 (kube-scheduler's own scores): the control does not tell the nodes apart", got)
	}
	if got := place("scored", "gpushare-dra-scored"); got != "dra-s1" {
		t.Errorf("with the chart's DRA scoring the 10Gi claim's pod went to %q, want dra-s1, whose card it fills", got)
	}
}
