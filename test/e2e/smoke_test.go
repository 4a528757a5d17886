package e2e

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/test/cluster"
)

// A user with a fresh local control plane and one node agent (no devices)
// sees the node Ready, and a plain pod scheduled onto it by the real
// kube-scheduler and reported Running; deleting the pod removes it.
func TestSmokeNodeReadyPodScheduledAndRunning(t *testing.T) {
	c := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := c.Client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("API server not answering: %v", err)
	}

	start := time.Now()
	node, err := c.StartNode(cluster.NodeOptions{Name: "smoke-node", AgentBinary: binDir + "/gpushare-nodeagent", NoDeviceManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent: %v", err)
		}
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), "smoke-node", metav1.DeleteOptions{})
	})
	if _, err := cluster.WaitNode(ctx, c.Client, "smoke-node", time.Minute, "Ready and untainted", cluster.NodeReady); err != nil {
		t.Fatalf("%v\nagent log: %s", err, node.LogFile())
	}
	t.Logf("node Ready and untainted %v after the agent started", time.Since(start).Round(time.Millisecond))

	// The lease is renewed (the node stays Ready for the node lifecycle controller).
	var first *coordinationv1.Lease
	err = wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "smoke-node", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil
		}
		if first == nil {
			first = l
			return false, nil
		}
		return l.Spec.RenewTime.After(first.Spec.RenewTime.Time), nil
	})
	if err != nil {
		t.Fatalf("node lease never renewed: %v", err)
	}

	// The default ServiceAccount exists (kube-controller-manager runs), so a
	// plain pod can be created; kube-scheduler binds it.
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no default ServiceAccount: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	start = time.Now()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.WaitPod(ctx, c.Client, "default", "smoke", time.Minute, "Running", cluster.PodRunning)
	if err != nil {
		t.Fatalf("%v\nscheduler log: %s\nagent log: %s", err, c.LogFile("kube-scheduler"), node.LogFile())
	}
	if got.Spec.NodeName != "smoke-node" {
		t.Errorf("pod bound to %q, want smoke-node", got.Spec.NodeName)
	}
	scheduled := false
	for _, cond := range got.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue {
			scheduled = true
		}
	}
	if !scheduled {
		t.Errorf("pod has no PodScheduled=True condition from kube-scheduler: %v", got.Status.Conditions)
	}
	t.Logf("pod scheduled and Running %v after creation", time.Since(start).Round(time.Millisecond))

	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "smoke", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, "default", "smoke", 30*time.Second); err != nil {
		t.Fatalf("deleted pod not removed by the agent: %v", err)
	}
}
