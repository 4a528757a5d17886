package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// kueueQueueLabel names a Job's LocalQueue (Kueue's batch/Job integration).
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

var workloadsGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// A real Kueue controller admits gpushare Jobs against a ClusterQueue's
// nominal quota of GPU memory units and of whole cards: Jobs within the quota
// are unsuspended and their pods run on a gpushare node through the extender;
// the Job over it stays suspended, its Workload saying which quota is short,
// though the node has room; when an admitted Job goes, the waiting one is
// admitted and runs.
func TestKueueAdmitsJobsWithinGPUMemoryAndWholeCardQuota(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	startKueue(ctx, t, c)
	node, _ := gpuNode(ctx, t, c, "kueue-node", "3x40GiB:NVIDIA-A100")
	waitWholeAllocatable(ctx, t, c, node, 3)
	ns := testNamespace(ctx, t, c, "kueue")

	names := api.DefaultNames()
	mem, whole := names.ResourceName(), names.WholeResourceName()
	queue := "gpushare-" + ns // cluster-scoped objects, one per test namespace
	manifest := fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [%[2]s, %[3]s]
    flavors:
    - name: %[1]s
      resources:
      - {name: %[2]s, nominalQuota: 30}
      - {name: %[3]s, nominalQuota: 1}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpu, namespace: %[4]s}
spec: {clusterQueue: %[1]s}
`, queue, mem, whole, ns)
	file := filepath.Join(t.TempDir(), "queue.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "--wait=false", "-f", file) })
	if out, err := c.Kubectl(ctx, "wait", "--for=condition=Active", "--timeout=60s", "clusterqueue/"+queue); err != nil {
		t.Fatalf("ClusterQueue %s not active: %v\n%s\nkueue log: %s", queue, err, out, c.LogFile("kueue"))
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}

	for _, step := range []struct {
		resource corev1.ResourceName
		fit      []*batchv1.Job // created one after the other: Kueue admits in creation order
		over     *batchv1.Job
	}{
		{mem, []*batchv1.Job{gpuJob(ns, "a", gpuPod(ns, "", 10)), gpuJob(ns, "b", gpuPod(ns, "", 20))}, gpuJob(ns, "c", gpuPod(ns, "", 10))},
		{whole, []*batchv1.Job{gpuJob(ns, "w1", wholePod(ns, "", 1))}, gpuJob(ns, "w2", wholePod(ns, "", 1))},
	} {
		for _, j := range step.fit {
			createJob(ctx, t, c, j)
			waitJobRuns(ctx, t, c, node, j)
		}
		createJob(ctx, t, c, step.over)
		want := fmt.Sprintf("insufficient unused quota for %s", step.resource)
		waitWorkloadPending(ctx, t, dyn, step.over, want)
		// And it stays suspended while the quota is used, though the node has room.
		time.Sleep(5 * time.Second)
		if j, err := c.Client.BatchV1().Jobs(ns).Get(ctx, step.over.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if !ptr.Deref(j.Spec.Suspend, false) {
			t.Fatalf("job %s over the ClusterQueue's quota of %s was unsuspended", j.Name, step.resource)
		}

		// An admitted Job goes: its quota frees and the waiting Job is admitted.
		gone := step.fit[0].Name
		if err := c.Client.BatchV1().Jobs(ns).Delete(ctx, gone, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		waitJobRuns(ctx, t, c, node, step.over)
	}
}

// startKueue starts the Kueue controller for the test (stopped when it ends).
func startKueue(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if dir, err := cluster.KueueDir(); err == nil && os.Getenv("GPUSHARE_E2E") != "1" {
		if _, err := os.Stat(filepath.Join(dir, "bin", "kueue")); err != nil {
			t.Skipf("the Kueue controller is not built in %s: run `make kueue`", dir)
		}
	}
	p, err := c.StartKueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
}

// gpuJob is a one-pod Job of the LocalQueue "gpu" running pod's spec,
// created suspended: Kueue unsuspends it once admitted.
func gpuJob(ns, name string, pod *corev1.Pod) *batchv1.Job {
	spec := pod.Spec
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{kueueQueueLabel: "gpu"}},
		Spec: batchv1.JobSpec{
			Suspend:      ptr.To(true),
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{Spec: spec},
		},
	}
}

func createJob(ctx context.Context, t *testing.T, c *cluster.Cluster, j *batchv1.Job) {
	t.Helper()
	if _, err := c.Client.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitJobRuns waits until Kueue has unsuspended the Job and its pod runs.
func waitJobRuns(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node, j *batchv1.Job) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ptr.Deref(got.Spec.Suspend, false) {
			last = "suspended"
			return false, nil
		}
		pods, err := c.Client.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("unsuspended, %d pods", len(pods.Items))
		for _, p := range pods.Items {
			last += fmt.Sprintf("; %s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == node.Opts.Name {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("job %s not admitted and running on %s: %v (last: %s)\nkueue log: %s\nextender log: %s", j.Name, node.Opts.Name, err, last, c.LogFile("kueue"), extender.LogPath)
	}
}

// waitWorkloadPending waits until Kueue has tried the Job's Workload and left
// it without quota, with a message containing want.
func waitWorkloadPending(ctx context.Context, t *testing.T, dyn dynamic.Interface, j *batchv1.Job, want string) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(workloadsGVR).Namespace(j.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range list.Items {
			if !ownedByJob(w, j.Name) {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
			last = fmt.Sprintf("workload %s: %v", w.GetName(), conds)
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "QuotaReserved" && m["status"] == "False" && strings.Contains(fmt.Sprint(m["message"]), want) {
					t.Logf("job %s waits: %s", j.Name, m["message"])
					return true, nil
				}
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("job %s: no pending Workload saying %q: %v (last: %s)", j.Name, want, err, last)
	}
}

func ownedByJob(w unstructured.Unstructured, job string) bool {
	for _, o := range w.GetOwnerReferences() {
		if o.Kind == "Job" && o.Name == job {
			return true
		}
	}
	return false
}
