package plugin

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/podrestest"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// slowInformer is an API server whose pod cache (the plugin's informer)
// has not shown the pods in late yet: they appear when the plugin asks the
// API server whether its cache is behind (the informer delivers them
// meanwhile), or when the test says so. Each record write that lands calls
// after, the extender's view of the node changing.
type slowInformer struct {
	*memCluster
	mu    sync.Mutex
	late  map[string]bool
	after func()
}

func (c *slowInformer) Pods() ([]*corev1.Pod, error) {
	all, err := c.memCluster.Pods()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := all[:0]
	for _, p := range all {
		if !c.late[p.Name] {
			out = append(out, p)
		}
	}
	return out, err
}

func (c *slowInformer) CacheBehind(context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	behind := len(c.late) > 0
	c.late = map[string]bool{}
	return behind, nil
}

func (c *slowInformer) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	err := c.memCluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
	if c.after != nil {
		c.after()
	}
	return err
}

// A burst fills a node of three 24 GiB cards with 10 GiB pods, two a card
// (4 GiB of each card stay free), and the extender keeps binding pods
// while any card's records have room. The kubelet admits pod "a", planned
// on card 1, before the plugin's pod cache shows it; the queue's head is
// then "b", planned on card 0. Were GetPreferredAllocation to steer by
// that head, the kubelet would give "a" units of card 0: a's record moves
// to card 0 and, before the swap moves "b" to card 1, card 1's records
// show room the extender fills — one pod more than the node holds, which
// the kubelet then fails with units of three cards (seen on the
// playground: "device IDs span more than one card" while a node's
// records still showed room). The kubelet's account names the pod it is
// admitting, so the preference waits for the cache to show it: every pod
// gets the card it was planned on, and none fails.
func TestPreferenceWaitsForThePodTheKubeletAdmits(t *testing.T) {
	ctx := context.Background()
	const size, capacity = 10, 24
	sn := simtest.New(t, nodeName, "spec:3x24GiB:Test-GPU")
	res := string(api.DefaultNames().ResourceName())
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	var arrivals uint64
	bind := func(name string, age int, card int) {
		arrivals++
		mem.arrival[types.UID("uid-"+name)] = arrivals
		mem.pods = append(mem.pods, podtest.Bound(nodeName, name, age).GPU("main", size).Assign(api.PhaseAssigned, sn.Cards[card]).Obj())
	}
	bind("a", 1, 1)
	for i, name := range []string{"b", "c", "d", "e", "f"} {
		bind(name, 2, []int{0, 0, 1, 2, 2}[i])
	}
	cl := &slowInformer{memCluster: mem, late: map[string]bool{"a": true}}
	// The extender: after every record write, a new pod on each card whose
	// records (pods not failed) leave room for one.
	extra := 0
	cl.after = func() {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		used := map[string]int64{}
		for _, p := range mem.pods {
			if p.Status.Phase == corev1.PodFailed {
				continue
			}
			if a, err := api.DefaultNames().AssignmentFromPod(p); err == nil {
				for _, c := range a.Containers {
					used[c.CardUUID] += c.Units
				}
			}
		}
		for i, c := range sn.Cards {
			if used[c.UUID]+size <= capacity {
				extra++
				name := fmt.Sprintf("z%d", extra)
				t.Logf("the extender binds %s on card %d, whose records show %d of %d GiB", name, i, used[c.UUID], capacity)
				mem.arrival[types.UID("uid-"+name)] = 100 + uint64(extra)
				mem.pods = append(mem.pods, podtest.Bound(nodeName, name, 3).GPU("main", size).Assign(api.PhaseAssigned, c).Obj())
			}
		}
	}
	srv := podrestest.Start(t, res)
	podres := podresources.NewKubelet(srv.Socket, res, mem.Arrival, nil)
	p := New(Config{PluginDir: t.TempDir(), AllocateWait: 10 * time.Second}, sn.Store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	k := newKubeletModel(sn.Store, &fakePodResources{})

	setPhase := func(name string, phase corev1.PodPhase) {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		for i, pod := range mem.pods {
			if pod.Name == name {
				mem.pods[i] = pod.DeepCopy()
				mem.pods[i].Status.Phase = phase
			}
		}
	}
	// next is the pod the kubelet admits next: the oldest pending one (by
	// creation, then the order it saw them bound).
	next := func() *corev1.Pod {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		var pending []*corev1.Pod
		for _, pod := range mem.pods {
			if pod.Status.Phase == corev1.PodPending {
				pending = append(pending, pod.DeepCopy())
			}
		}
		sort.SliceStable(pending, func(i, j int) bool {
			if ti, tj := pending[i].CreationTimestamp, pending[j].CreationTimestamp; !ti.Equal(&tj) {
				return ti.Before(&tj)
			}
			return mem.arrival[pending[i].UID] < mem.arrival[pending[j].UID]
		})
		if len(pending) == 0 {
			return nil
		}
		return pending[0]
	}
	admitted := 0
	for pod := next(); pod != nil; pod = next() {
		planned := cl.record(t, pod.Name).Containers[0].CardUUID
		srv.Know(pod.Namespace, pod.Name) // the kubelet's pod manager has it: it is being admitted
		avail := k.available()
		pref, err := p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: size}}})
		if err != nil {
			t.Fatalf("GetPreferredAllocation for %s: %v", pod.Name, err)
		}
		ids := pref.ContainerResponses[0].DeviceIDs
		if len(ids) != size { // the device manager then takes any available units
			ids = avail[:size]
		}
		cl.CacheBehind(ctx) // by the Allocate, the informer has delivered every pod
		if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
			t.Errorf("the kubelet fails pod %s (planned on card %d): %v", pod.Name, indexOf(sn.Sim, planned), err)
			setPhase(pod.Name, corev1.PodFailed)
			continue
		}
		for _, id := range ids {
			k.free[id] = false
		}
		srv.Hold(pod.Namespace, pod.Name, "main", ids...)
		if _, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
			t.Fatalf("PreStartContainer of %s: %v", pod.Name, err)
		}
		setPhase(pod.Name, corev1.PodRunning)
		admitted++
		if got, _ := cardOfIDs(ids); got != planned {
			t.Errorf("pod %s was planned on card %d; the kubelet gave it card %d", pod.Name, indexOf(sn.Sim, planned), indexOf(sn.Sim, got))
		}
	}
	if admitted != 6 {
		t.Errorf("%d pods admitted; want the 6 the node holds", admitted)
	}
}
