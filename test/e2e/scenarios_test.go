package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Issue 5, tests 3 and 7. A pod with two containers of 30 GiB on a node of
// two 40 GiB cards: each container gets its own card, and its mount is that
// card's. Deleting the pod frees the memory: a 40 GiB pod then fits.
func TestMultiContainerPodGetsACardPerContainerAndDeletionFreesThem(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "mc-node", "2x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "mc")

	multi := runPod(ctx, t, c, gpuPod(ns, "multi", 30, 30), node)
	asg := checkCards(ctx, t, c, multi)
	if len(asg.Containers) != 2 || asg.Containers[0].CardUUID == asg.Containers[1].CardUUID {
		t.Errorf("containers share a card or are missing: %+v", asg.Containers)
	}
	t.Logf("after multi: %s", usage(inv, checkCapacity(ctx, t, c, "mc-node", inv)))

	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "multi", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, ns, "multi", time.Minute); err != nil {
		t.Fatalf("multi not removed: %v", err)
	}
	whole := runPod(ctx, t, c, gpuPod(ns, "whole", 40), node)
	checkCards(ctx, t, c, whole)
	t.Logf("after whole: %s", usage(inv, checkCapacity(ctx, t, c, "mc-node", inv)))
}

// Issue 5, test 4. Four 20 GiB pods created at once on a node of two 40 GiB
// cards: all run, no card is over capacity, no unit is held twice, and every
// container's mount matches its pod's assignment.
func TestSameSizePodsCreatedTogetherNeverOverbookACard(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "burst-node", "2x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "burst")

	names := []string{"b0", "b1", "b2", "b3"}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, n, 20), metav1.CreateOptions{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		waitRunning(ctx, t, c, ns, n, node)
	}
	used := checkCapacity(ctx, t, c, "burst-node", inv)
	for _, card := range inv.Cards {
		if used[card.UUID] != 40 {
			t.Errorf("card %d holds %d units, want 40 (four 20s on two 40s)", card.Index, used[card.UUID])
		}
	}
	t.Logf("burst: %s", usage(inv, used))
}

// Issue 5, test 6. With pods running, the device plugin is killed (the agent
// restarts it, as a DaemonSet would) and then the node agent (the kubelet)
// is restarted: each time the plugin registers again, the capacity comes
// back, running pods keep their cards and records, and new pods still get
// exactly their assigned cards.
func TestPluginAndKubeletRestartsKeepRunningPodsCards(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "rs-node", "1x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "rs")

	p1 := runPod(ctx, t, c, gpuPod(ns, "p1", 30), node)
	before := map[string]string{"p1": p1.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]}

	// Device plugin restart.
	regs := node.Registrations()
	old := node.PluginPID()
	if old == 0 {
		t.Fatal("no plugin PID recorded")
	}
	if err := syscall.Kill(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(context.Context) (bool, error) {
		pid := node.PluginPID()
		return pid != 0 && pid != old && node.Registrations() > regs, nil
	}); err != nil {
		t.Fatalf("plugin not restarted by the agent and registered again: %v", err)
	}
	waitInventory(ctx, t, c, node)
	p2 := runPod(ctx, t, c, gpuPod(ns, "p2", 50), node)
	checkCards(ctx, t, c, p2)
	before["p2"] = p2.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]

	// Kubelet (agent) restart; the plugin is restarted with it.
	restarted := restartAgent(ctx, t, c, node)
	for name, rec := range before {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("%s after the restarts: %v %v", name, p.Status.Phase, err)
		}
		if p.Annotations[api.DefaultNames().AnnotationSimulatedContainers()] != rec {
			t.Errorf("%s's record changed across the restarts:\nbefore %s\nafter  %s", name, rec, p.Annotations[api.DefaultNames().AnnotationSimulatedContainers()])
		}
		checkCards(ctx, t, c, p)
	}
	p3 := runPod(ctx, t, c, gpuPod(ns, "p3", 10), restarted)
	checkCards(ctx, t, c, p3)
	t.Logf("after the restarts: %s", usage(inv, checkCapacity(ctx, t, c, "rs-node", inv)))
}

// Issue 5, test 5. Two 30 GiB pods fill two 40 GiB cards to 30; the extender
// is restarted; then three 10 GiB pods arrive: two fit (10 left per card),
// the third must stay Pending — a restarted extender that forgot the first
// pods would double-book a card.
func TestExtenderRestartDoesNotDoubleBook(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "er-node", "2x40GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "er")
	runPod(ctx, t, c, gpuPod(ns, "a", 30), node)
	runPod(ctx, t, c, gpuPod(ns, "b", 30), node)

	if err := extender.Stop(); err != nil {
		t.Fatal(err)
	}
	var err error
	if extender, err = c.StartExtender(ctx, extenderBin, extenderPort, extenderArgs...); err != nil {
		t.Fatal(err)
	}
	runPod(ctx, t, c, gpuPod(ns, "c", 10), node)
	runPod(ctx, t, c, gpuPod(ns, "d", 10), node)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "e", 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": "e", "reason": "FailedScheduling"}.String()})
		return err == nil && len(evs.Items) > 0, nil
	}); err != nil {
		t.Fatalf("pod e (no room left) never reported FailedScheduling: %v", err)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "e", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("pod e was bound to %q: a card is double-booked (%v)", p.Spec.NodeName, err)
	}
	used := checkCapacity(ctx, t, c, "er-node", inv)
	for _, card := range inv.Cards {
		if used[card.UUID] != 40 {
			t.Errorf("card %d holds %d units, want 40", card.Index, used[card.UUID])
		}
	}
	t.Logf("after the extender restart: %s", usage(inv, used))
}
