package plugin

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/podtest"
)

// observedCluster is a memCluster that calls after once each record write
// has landed, so that a test can check the records at every observation.
type observedCluster struct {
	*memCluster
	after func(name string)
}

func (c *observedCluster) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	err := c.memCluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
	if c.after != nil {
		c.after(name)
	}
	return err
}

// preStart is the kubelet starting a container that holds ids: it calls
// PreStartContainer (the plugin registers PreStartRequired) and starts the
// container once the call returns.
func (k *kubeletModel) preStart(ctx context.Context, p *Plugin, ids []string) error {
	if !p.units.res.options.PreStartRequired {
		return nil
	}
	_, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids})
	return err
}

// Nine pods of 8 GiB created in the same second on a node with three 24 GiB
// cards, three assigned to each card, admitted by the kubelet in another
// order than the plugin's queue (issue 16: "records name the wrong card
// during a burst"), with the reconciler running between Allocate and the
// container's start. At every observation — after every record write and
// after each of the kubelet's calls:
//   - a running container's record is Allocated and names the card it got;
//   - no card's records hold more than the card;
//   - no pod's record is shown Allocated a second time for an allocation that
//     is not its own.
func TestBurstRecordsNameTheCardAtEveryObservation(t *testing.T) {
	for _, order := range [][]string{
		// Interleaved over the cards: the queue's head is rarely the one.
		{"c", "f", "i", "b", "e", "h", "a", "d", "g"},
		// The first two as queued, then one from the next card while the
		// queue's head is planned on the card with one slot left.
		{"a", "b", "d", "c", "e", "f", "g", "h", "i"},
	} {
		t.Run(fmt.Sprint(order), func(t *testing.T) { testBurst(t, order) })
	}
}

func testBurst(t *testing.T, order []string) {
	ctx := context.Background()
	sn := simtest.New(t, nodeName, "spec:3x24GiB:Test-GPU")
	sim, store := sn.Sim, sn.Store
	card := func(i int) podtest.Card { return sn.Cards[i] }
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	for i, name := range names {
		mem.arrival[types.UID("uid-"+name)] = uint64(i)
		mem.pods = append(mem.pods, podtest.Bound(nodeName, name, 1).GPU("main", 8).Assign(api.PhaseAssigned, card(i/3)).Obj())
	}
	// The pod cache lists pods in no particular order: here newest first,
	// so that a pod the plugin guessed comes after the pods that really got
	// the units.
	slices.Reverse(mem.pods)
	byName := map[string]*corev1.Pod{}
	for _, p := range mem.pods {
		byName[p.Name] = p.DeepCopy()
	}

	podres := &fakePodResources{}
	k := newKubeletModel(store, podres)
	running := map[string]string{} // pod → the card its container got
	admitting := ""                // the pod the kubelet is allocating now
	wrongNames := map[string]int{} // pod → writes showing it Allocated for an allocation not its own
	wrongNow := map[string]bool{}
	var violations []string
	// check looks at the records. Allocated records count against their
	// card at every observation; all records (Assigned too: the extender and
	// the inspector count both) between the kubelet's calls, since a swap
	// (records.go) is two writes.
	check := func(when string, between bool) {
		used, allocated := map[string]int64{}, map[string]int64{}
		for _, name := range names {
			a := mem.record(t, name)
			_, run := running[name]
			for _, c := range a.Containers {
				used[c.CardUUID] += c.Units
				if a.Phase == api.PhaseAllocated || run { // a running pod's record holds (api.RecordHolds)
					allocated[c.CardUUID] += c.Units
				}
			}
			got := a.Containers[0].CardUUID
			if want, ok := running[name]; ok && got != want {
				violations = append(violations, fmt.Sprintf("%s: running pod %s got card %d; its record says %s on card %d", when, name, indexOf(sim, want), a.Phase, indexOf(sim, got)))
			}
			wrong := a.Phase == api.PhaseAllocated && name != admitting && !run && !k.holds(name)
			if wrong && !wrongNow[name] {
				wrongNames[name]++
			}
			wrongNow[name] = wrong
		}
		for i := range 3 {
			if u := allocated[sim.UUID(i)]; u > 24 {
				violations = append(violations, fmt.Sprintf("%s: card %d's Allocated records hold %d of 24 GiB", when, i, u))
			}
			if u := used[sim.UUID(i)]; between && u > 24 {
				violations = append(violations, fmt.Sprintf("%s: card %d's records hold %d of 24 GiB", when, i, u))
			}
		}
	}
	cl := &observedCluster{memCluster: mem, after: func(name string) { check("after writing "+name+"'s record", false) }}
	p := New(Config{PluginDir: t.TempDir()}, store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))

	for _, name := range order {
		pod := byName[name]
		admitting = name
		ids, err := k.allocate(ctx, p, pod, pod.Spec.Containers[0])
		if err != nil {
			t.Fatalf("admitting %s: %v", name, err)
		}
		check("after the Allocate for "+name, true)
		k.commit(pod, "main", ids)
		admitting = ""
		// The reconciler (triggered by every Allocate) reads the kubelet's
		// account before the container starts. It may leave a swap with a
		// pod it named before to the kubelet's next call (records.go), so
		// only Allocated records are checked here.
		if err := p.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		check("after reconciling "+name, false)
		if err := k.preStart(ctx, p, ids); err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		running[name], _ = cardOfIDs(ids)
		check("once "+name+" runs", true)
	}
	for _, v := range violations {
		t.Error(v)
	}
	for name, n := range wrongNames {
		if n > 1 {
			t.Errorf("pod %s was shown Allocated for allocations not its own at %d observations", name, n)
		}
	}
}

// holds reports whether the kubelet's account shows the pod holding units.
func (k *kubeletModel) holds(pod string) bool {
	for _, h := range k.held {
		if h.Pod == pod {
			return true
		}
	}
	return false
}

func indexOf(sim *nvml.Simulator, uuid string) int {
	for i := range 8 {
		if sim.UUID(i) == uuid {
			return i
		}
	}
	return -1
}
