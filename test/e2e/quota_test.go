package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// A namespace's ResourceQuota on the requests of gpushare's extended
// resources (GPU memory units and whole cards) caps what its pods may ask
// for, on the real API server's ResourceQuota admission and
// kube-controller-manager's resourcequota controller: pods within the quota
// run, the one over it is refused at creation with the API server's quota
// message, and deleting a pod lets the next one in.
func TestResourceQuotaCapsGPUMemoryAndWholeCards(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, _ := gpuNode(ctx, t, c, "quota-node", "3x40GiB:NVIDIA-A100")
	waitWholeAllocatable(ctx, t, c, node, 3)
	ns := testNamespace(ctx, t, c, "quota")

	names := api.DefaultNames()
	mem := corev1.ResourceName("requests." + string(names.ResourceName()))
	whole := corev1.ResourceName("requests." + string(names.WholeResourceName()))
	createQuota(ctx, t, c, ns, "gpu", corev1.ResourceList{
		mem:   *resource.NewQuantity(30, resource.DecimalSI),
		whole: *resource.NewQuantity(1, resource.DecimalSI),
	})

	// Within the quota: 10 + 20 units and one whole card run.
	runPod(ctx, t, c, gpuPod(ns, "a", 10), node)
	runPod(ctx, t, c, gpuPod(ns, "b", 20), node)
	runPod(ctx, t, c, wholePod(ns, "w1", 1), node)

	// Over it: refused at creation, though the node has room for both.
	refusedByQuota(ctx, t, c, gpuPod(ns, "c", 10),
		fmt.Sprintf("exceeded quota: gpu, requested: %[1]s=10, used: %[1]s=30, limited: %[1]s=30", mem))
	refusedByQuota(ctx, t, c, wholePod(ns, "w2", 1),
		fmt.Sprintf("exceeded quota: gpu, requested: %[1]s=1, used: %[1]s=1, limited: %[1]s=1", whole))

	// Deleting a pod returns its share of the quota: the refused pods get in.
	for _, p := range []struct{ gone, next *corev1.Pod }{
		{gpuPod(ns, "a", 10), gpuPod(ns, "c", 10)},
		{wholePod(ns, "w1", 1), wholePod(ns, "w2", 1)},
	} {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, p.gone.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		admittedOnceFreed(ctx, t, c, p.next)
		waitRunning(ctx, t, c, ns, p.next.Name, node)
	}
}

// createQuota creates a ResourceQuota and waits until the resourcequota
// controller has written its status: the API server's admission enforces
// only the limits in status.hard.
func createQuota(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, hard corev1.ResourceList) {
	t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for r := range hard {
			if _, ok := got.Status.Hard[r]; !ok {
				return false, nil
			}
			if _, ok := got.Status.Used[r]; !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("quota %s/%s: no status from kube-controller-manager's resourcequota controller: %v", ns, name, err)
	}
}

// refusedByQuota creates the pod and wants the API server to refuse it as
// Forbidden with the quota message want.
func refusedByQuota(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, want string) {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil {
		t.Fatalf("pod %s admitted over the namespace's quota; want refused with %q", pod.Name, want)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("pod %s: %v; want Forbidden with %q", pod.Name, err, want)
	}
	t.Logf("refused as it should be: %v", err)
}

// admittedOnceFreed creates the pod until the API server admits it: the
// resourcequota controller lowers the quota's usage soon after a pod goes,
// and until then the pod is refused with the quota message.
func admittedOnceFreed(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			return false, nil // the poll's deadline: last keeps the API server's answer
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
			last = err
			return false, nil
		}
		return false, err
	}); err != nil {
		t.Fatalf("pod %s not admitted after a pod of the namespace was deleted: %v (last: %v)", pod.Name, err, last)
	}
}
