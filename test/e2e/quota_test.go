package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	refusedWith(t, "pod c over the quota", tryCreatePod(ctx, c, gpuPod(ns, "c", 10)),
		fmt.Sprintf("exceeded quota: gpu, requested: %[1]s=10, used: %[1]s=30, limited: %[1]s=30", mem))
	refusedWith(t, "pod w2 over the quota", tryCreatePod(ctx, c, wholePod(ns, "w2", 1)),
		fmt.Sprintf("exceeded quota: gpu, requested: %[1]s=1, used: %[1]s=1, limited: %[1]s=1", whole))

	// Deleting a pod returns its share of the quota: the refused pods get in.
	for _, p := range []struct{ gone, next *corev1.Pod }{
		{gpuPod(ns, "a", 10), gpuPod(ns, "c", 10)},
		{wholePod(ns, "w1", 1), wholePod(ns, "w2", 1)},
	} {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, p.gone.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		admittedOnceFreed(ctx, t, "pod "+p.next.Name, func(ctx context.Context) error { return tryCreatePod(ctx, c, p.next) })
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

// refusedWith wants err, the API server's answer to creating what, to be
// Forbidden with the message want.
func refusedWith(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s admitted; want refused with %q", what, want)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v; want Forbidden with %q", what, err, want)
	}
	t.Logf("refused as it should be: %v", err)
}

// tryCreatePod creates pod and returns the API server's answer.
func tryCreatePod(ctx context.Context, c *cluster.Cluster, pod *corev1.Pod) error {
	_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
	return err
}

// admittedOnceFreed creates what until the API server admits it: the
// resourcequota controller lowers the quota's usage soon after an object
// goes, and until then create is refused with the quota message.
func admittedOnceFreed(ctx context.Context, t *testing.T, what string, create func(context.Context) error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := create(ctx)
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
		t.Fatalf("%s not admitted after an object of its namespace was deleted: %v (last: %v)", what, err, last)
	}
}

// For DRA claims ResourceQuota counts devices per DeviceClass, not the memory
// each asks (Kubernetes 1.37 does not count consumable capacity); the chart's
// claim-memory policy caps what each device of the gpushare class asks in a
// namespace the operator annotated, so the two bound the namespace's claimed
// memory: here 2 devices × 10Gi. Claims need no node to be admitted.
func TestClaimedMemoryIsBoundedByDeviceQuotaAndNamespaceCap(t *testing.T) {
	c := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	system := testNamespace(ctx, t, c, "gpushare-system")
	ns := testNamespace(ctx, t, c, "claimquota")
	open := testNamespace(ctx, t, c, "claimopen")
	applyAdmissionPolicySubset(ctx, t, c, system, []string{"gpushare-claim-memory"}, "--set", "dra.enabled=true")
	enforceAdmission(ctx, t, c, system, ns)
	enforceAdmission(ctx, t, c, system, open)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10Gi"}}}`, api.DefaultNames().AnnotationClaimMemoryMax())
	if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	devices := corev1.ResourceName(draDriver + corev1.ResourceClaimsPerClass)
	createQuota(ctx, t, c, ns, "claims", corev1.ResourceList{devices: *resource.NewQuantity(2, resource.DecimalSI)})
	claims := c.Client.ResourceV1().ResourceClaims(ns)
	create := func(ctx context.Context, claim *resourceapi.ResourceClaim, opts metav1.CreateOptions) error {
		_, err := c.Client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, opts)
		return err
	}

	// Over the cap: refused by the policy, once the API server has loaded it.
	capMsg := "a claim may ask at most 10Gi of GPU memory per device of " + draDriver
	var last error
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = create(ctx, memoryClaim(ns, "probe", "20Gi"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), capMsg), nil
	}); err != nil {
		t.Fatalf("a 20Gi claim in %s is not refused by the claim-memory policy: %v (last answer: %v)", ns, err, last)
	}
	refusedWith(t, "a 20Gi claim", create(ctx, memoryClaim(ns, "big", "20Gi"), metav1.CreateOptions{}), capMsg)
	listed := memoryClaim(ns, "listed", "8Gi")
	listed.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "small", DeviceClassName: draDriver, Capacity: listed.Spec.Devices.Requests[0].Exactly.Capacity},
		{Name: "large", DeviceClassName: draDriver, Capacity: memoryClaim(ns, "", "40Gi").Spec.Devices.Requests[0].Exactly.Capacity},
	}}
	refusedWith(t, "a claim whose second choice asks 40Gi", create(ctx, listed, metav1.CreateOptions{}), capMsg)

	// Within it: two devices, then the device quota refuses a third.
	for _, cl := range []*resourceapi.ResourceClaim{memoryClaim(ns, "a", "10Gi"), memoryClaim(ns, "b", "4Gi")} {
		if err := create(ctx, cl, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s within the cap and the quota: %v", cl.Name, err)
		}
	}
	refusedWith(t, "a third device", create(ctx, memoryClaim(ns, "c", "1Gi"), metav1.CreateOptions{}),
		fmt.Sprintf("exceeded quota: claims, requested: %[1]s=1, used: %[1]s=2, limited: %[1]s=2", devices))
	if err := claims.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	admittedOnceFreed(ctx, t, "claim c", func(ctx context.Context) error {
		return create(ctx, memoryClaim(ns, "c", "1Gi"), metav1.CreateOptions{})
	})

	// A namespace without the annotation is not capped.
	if err := create(ctx, memoryClaim(open, "big", "40Gi"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a 40Gi claim in a namespace without %s: %v", api.DefaultNames().AnnotationClaimMemoryMax(), err)
	}
}
