package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// Issue 16, "records name the wrong card during a burst": nine 8 GiB pods
// created at once on a node of three 24 GiB cards (the node agent admits
// same-second pods by name, the plugin's queue by arrival: another order).
// Every state of every pod the API server reports is checked as it comes,
// with no settling delay:
//   - a Running pod's record names, for each container, the card its devices,
//     env and mount came from (and becomes Allocated);
//   - no card's records hold more than the card, counting plans (Assigned
//     records of pods not yet admitted) beside allocations (Allocated
//     records): what the extender and the inspector count. When the kubelet
//     gives a pod another card than its plan, the plugin swaps a waiting
//     same-size pod's plan so that neither card's records ever sum above it.
func TestBurstRecordsNameTheCardAtEveryObservation(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, inv := gpuNode(ctx, t, c, "rb-node", "3x24GiB:NVIDIA-A100")
	ns := testNamespace(ctx, t, c, "rb")

	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const pods = 9
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, fmt.Sprintf("rb-%d", i), 8), metav1.CreateOptions{})
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

	latest := map[string]*corev1.Pod{}
	running := map[string]bool{}
	observations, violations := 0, 0
	report := func(format string, args ...any) {
		violations++
		if violations <= 20 {
			t.Errorf(format, args...)
		}
	}
	for len(running) < pods {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-ctx.Done():
			t.Fatalf("%d of %d pods running when the deadline passed\nagent log: %s", len(running), pods, node.LogFile())
		}
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		observations++
		latest[pod.Name] = pod
		if pod.Status.Phase == corev1.PodRunning {
			running[pod.Name] = true
			if _, err := nodeagent.RecordsFromPod(pod); err != nil {
				report("pod %s Running without the agent's container records: %v", pod.Name, err)
			} else if _, problems := cardProblems(t, api.DefaultNames(), pod); len(problems) > 0 {
				report("observation %d, pod %s Running (resourceVersion %s): %v", observations, pod.Name, pod.ResourceVersion, problems)
			}
		}
		allocated, planned := map[string]int64{}, map[string]int64{}
		holders := map[string][]string{}
		for _, p := range latest {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			a, err := api.DefaultNames().AssignmentFromPod(p)
			if err != nil {
				continue
			}
			for _, ca := range a.Containers {
				planned[ca.CardUUID] += ca.Units
				holders[ca.CardUUID] = append(holders[ca.CardUUID], fmt.Sprintf("%s %s %s", p.Name, a.Phase, p.Status.Phase))
				if api.HeldPhase(p, a) == api.PhaseAllocated {
					allocated[ca.CardUUID] += ca.Units
				}
			}
		}
		for _, card := range inv.Cards {
			if allocated[card.UUID] > card.Units {
				report("observation %d (pod %s): card %d's Allocated records hold %d of %d", observations, pod.Name, card.Index, allocated[card.UUID], card.Units)
			}
			if planned[card.UUID] > card.Units {
				report("observation %d (pod %s %s): card %d's records hold %d of %d counting plans (%d allocated): %v", observations, pod.Name, ev.Type, card.Index, planned[card.UUID], card.Units, allocated[card.UUID], holders[card.UUID])
			}
		}
	}
	// The plugin writes a record only to correct its card (or its phase without the kubelet's
	// account): in a burst whose pods mostly start on the card the extender planned, most records
	// stay as the extender wrote them. Its writes show in the pods' managedFields.
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for i := range list.Items {
		if slices.ContainsFunc(list.Items[i].ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return strings.Contains(m.Manager, "device-plugin") }) {
			written++
		}
	}
	if written >= pods {
		t.Errorf("the device plugin wrote the records of %d of %d pods; want only the corrected ones (a record naming the right card is left as the extender wrote it)", written, pods)
	}
	t.Logf("the device plugin wrote %d of %d records (corrections)", written, pods)
	used := checkCapacity(ctx, t, c, "rb-node", inv)
	t.Logf("%d pods running after %d observations, %d violations; %s", pods, observations, violations, usage(inv, used))
}
