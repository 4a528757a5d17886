package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// alibabaManifest is a pod as Alibaba's gpushare documents it
// (AliyunContainerService/gpushare-scheduler-extender, samples/): no
// schedulerName (their extender is added to the default scheduler's
// configuration), GiB of aliyun.com/gpu-mem in the limits. It is applied
// unchanged.
const alibabaManifest = `apiVersion: v1
kind: Pod
metadata:
  name: binpack-1
  labels:
    app: binpack-1
spec:
  containers:
  - name: binpack-1
    image: cheyang/gpu-player:v2
    resources:
      limits:
        # GiB
        aliyun.com/gpu-mem: 8
`

// With gpushare configured with Alibaba's resource name, a pod written for
// Alibaba's gpushare runs unchanged and gets its card: the extender and the
// device plugin run with --resource-name=aliyun.com/gpu-mem (and, so that
// they share nothing with the suite's default installation, their own
// --domain and --whole-resource-name), and a kube-scheduler whose default
// profile calls that extender, as Alibaba's installation configures it,
// schedules the pod. The container gets the assigned card's mount, its
// units, and Alibaba's ALIYUN_COM_GPU_MEM_* variables.
func TestAlibabaManifestRunsUnchanged(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	names, err := api.NewNames("gpushare.alibaba-compat.test", api.AlibabaResourceName, "alibaba-compat.test/gpu")
	if err != nil {
		t.Fatal(err)
	}

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ext, err := c.StartExtender(ctx, extenderBin, port, "--policy=binpack", "--domain="+names.Domain(),
		"--resource-name="+string(names.ResourceName()), "--whole-resource-name="+string(names.WholeResourceName()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Stop() })
	sched, err := c.StartScheduler("kube-scheduler-alibaba", fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
  - schedulerName: default-scheduler
extenders:
  - urlPrefix: http://127.0.0.1:%d
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: 1000
    nodeCacheCapable: true
    ignorable: false
    httpTimeout: 10s
    managedResources:
      - name: %s
        ignoredByScheduler: false
      - name: %s
        ignoredByScheduler: false
`, port, names.ResourceName(), names.WholeResourceName()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sched.Stop() })

	node, inv := gpuNode(ctx, t, c, "alibaba-1", "1x40GiB:NVIDIA-A100,1x16GiB:NVIDIA-T4", withNames(names))
	ns := testNamespace(ctx, t, c, "alibaba")

	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(alibabaManifest), &pod); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.WaitPod(ctx, c.Client, ns, pod.Name, 2*time.Minute, "Running", cluster.PodRunning)
	if err != nil {
		t.Fatalf("%v\nextender log: %s\nscheduler log: %s\nagent log: %s", err, ext.LogPath, sched.LogPath, node.LogFile())
	}
	if got.Spec.SchedulerName != "default-scheduler" || got.Spec.NodeName != node.Opts.Name {
		t.Fatalf("pod scheduled by %q onto %q, want default-scheduler onto %s", got.Spec.SchedulerName, got.Spec.NodeName, node.Opts.Name)
	}
	asg := checkCardsNamed(ctx, t, c, names, got)
	if len(asg.Containers) != 1 || asg.Containers[0].Units != 8 {
		t.Fatalf("assignment %+v, want 8 units for the one container", asg)
	}
	var card api.Card
	for _, cd := range inv.Cards {
		if cd.UUID == asg.Containers[0].CardUUID {
			card = cd
		}
	}
	if card.Units != 16 {
		t.Errorf("binpack gave card %+v, want the 16 GiB one", card)
	}
	env := containerRecord(t, got, "binpack-1").Env
	want := map[string]string{
		api.EnvAlibabaCardIndex:      strconv.Itoa(card.Index),
		api.EnvAlibabaContainerUnits: "8",
		api.EnvAlibabaCardUnits:      strconv.FormatInt(card.Units, 10),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("container env %s=%q, want %q (env %v)", k, env[k], v, env)
		}
	}
}
