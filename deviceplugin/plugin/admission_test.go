package plugin

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// memCluster is the API server and an informer that is always up to date:
// pods in creation order, record writes visible at once, and the order in
// which the informer saw the pods bound (arrival; absent: not known).
type memCluster struct {
	// behind: the API server has a pod of the node the informer has not
	// shown yet (CacheBehind), e.g. one the kubelet saw first.
	behind  bool
	mu      sync.Mutex
	pods    []*corev1.Pod
	arrival map[types.UID]uint64
}

func (c *memCluster) Arrival(uid types.UID) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.arrival[uid]
	return n, ok
}

// CacheBehind says behind.
func (c *memCluster) CacheBehind(context.Context) (bool, error) { return c.behind, nil }

// RecordAhead: record writes are visible at once.
func (c *memCluster) RecordAhead(*corev1.Pod) bool { return false }

// PodsChanged gives no notice: the plugin looks again every allocatePoll.
func (c *memCluster) PodsChanged() <-chan struct{} { return nil }

func (c *memCluster) Pods() ([]*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*corev1.Pod, len(c.pods))
	for i, p := range c.pods {
		out[i] = p.DeepCopy()
	}
	return out, nil
}

func (c *memCluster) UpdateAssignment(_ context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pods {
		if p.Namespace != namespace || p.Name != name || p.UID != uid {
			continue
		}
		a, err := api.DefaultNames().AssignmentFromPod(p)
		if err != nil {
			return err
		}
		if !mutate(&a) {
			return nil
		}
		s, err := api.EncodeAssignment(a)
		if err != nil {
			return err
		}
		p.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	}
	return nil
}

func (c *memCluster) RepairAssignment(_ context.Context, namespace, name string, uid types.UID, rebuild func(*corev1.Pod) (api.Assignment, bool)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pods {
		if p.Namespace != namespace || p.Name != name || p.UID != uid {
			continue
		}
		a, ok := rebuild(p.DeepCopy())
		if !ok {
			return nil
		}
		s, err := api.EncodeAssignment(a)
		if err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	}
	return nil
}

func (c *memCluster) record(t *testing.T, name string) api.Assignment {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pods {
		if p.Name == name {
			a, err := api.DefaultNames().AssignmentFromPod(p)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatalf("no pod %s", name)
	return api.Assignment{}
}

// kubeletModel admits pods for one resource the way the kubelet's device
// manager does: one container at a time, GetPreferredAllocation over the free
// units, Allocate, and only after the plugin answered, the holding is in its
// own account (what PodResources shows).
type kubeletModel struct {
	free   map[string]bool // unit IDs
	podres *fakePodResources
	held   []podresources.Holding
}

func newKubeletModel(store *inventory.Store, podres *fakePodResources) *kubeletModel {
	k := &kubeletModel{free: map[string]bool{}, podres: podres}
	for _, d := range store.Devices() {
		k.free[d.ID] = true
	}
	return k
}

func (k *kubeletModel) available() []string {
	var out []string
	for id, ok := range k.free {
		if ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// holder is "pod/container" holding exactly ids in the kubelet's account.
func (k *kubeletModel) holder(ids []string) string {
	for _, h := range k.held {
		if podresources.IDsKey(h.IDs) == podresources.IDsKey(ids) {
			return h.Pod + "/" + h.Container
		}
	}
	return ""
}

// allocate runs one container's device allocation against p and returns the
// IDs the container got. The holding is not yet in the kubelet's account
// (commit puts it there).
func (k *kubeletModel) allocate(ctx context.Context, p *Plugin, pod *corev1.Pod, c corev1.Container) ([]string, error) {
	q := c.Resources.Limits[api.DefaultNames().ResourceName()]
	size := int(q.Value())
	avail := k.available()
	pref, err := p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: int32(size)}}})
	if err != nil {
		return nil, fmt.Errorf("GetPreferredAllocation: %w", err)
	}
	ids := pref.ContainerResponses[0].DeviceIDs
	valid := len(ids) == size
	for _, id := range ids {
		valid = valid && k.free[id]
	}
	if !valid { // the device manager then picks any free units
		ids = avail[:size]
	}
	if _, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
		return nil, fmt.Errorf("Allocate: %w", err)
	}
	for _, id := range ids {
		k.free[id] = false
	}
	return ids, nil
}

// commit puts a holding into the kubelet's account (PodResources).
func (k *kubeletModel) commit(pod *corev1.Pod, container string, ids []string) {
	k.held = append(k.held, podresources.Holding{Namespace: pod.Namespace, Pod: pod.Name, Container: container, IDs: ids})
	k.podres.set(k.held...)
}

// When the plugin reconciles relative to the kubelet's admissions.
type reconcileAt int

const (
	reconcileAtEnd reconcileAt = iota
	// reconcileRacingKubelet: after each Allocate, before the kubelet has
	// put the allocation into its account (the plugin triggers reconciliation
	// as it answers; the kubelet records the holding after the answer).
	reconcileRacingKubelet
	// reconcileAfterKubelet: after each admission, once the kubelet's account has it.
	reconcileAfterKubelet
)

// Four pods of 20 GiB created in the same second on a node with two 40 GiB
// cards, two assigned to each card: the kubelet's admission order among them
// is not the plugin's tie-break. Whatever the order and whenever the plugin
// reconciles, no Allocate fails, no container the kubelet already admitted is
// taken again for another call, and once PodResources is read every record
// names the card its container actually holds.
func TestSameSecondSameSizePods(t *testing.T) {
	tests := []struct {
		name      string
		kubelet   []string // admission order; the plugin's tie-break (UID) is a, b, c, d
		reconcile reconcileAt
		// restartAfter > 0: the plugin restarts (empty memory) after that many admissions.
		restartAfter int
		// arrival is the order the plugin's informer saw the pods bound (nil: unknown).
		arrival []string
		// exact: every Allocate is attributed to the pod the kubelet admits
		// (records are right at once, before any reconciliation).
		exact bool
	}{
		{name: "ties broken by arrival, the kubelet's order: every decision exact", kubelet: []string{"c", "a", "d", "b"}, arrival: []string{"c", "a", "d", "b"}, reconcile: reconcileAtEnd, exact: true},
		{name: "ties broken by arrival, arrival unknown for the two newest", kubelet: []string{"d", "b", "c", "a"}, arrival: []string{"d", "b"}, reconcile: reconcileRacingKubelet},
		{name: "kubelet order equals the tie-break", kubelet: []string{"a", "b", "c", "d"}, reconcile: reconcileRacingKubelet},
		{name: "first two swapped, reconciliation only at the end", kubelet: []string{"b", "a", "c", "d"}, reconcile: reconcileAtEnd},
		{name: "first two swapped, reconciliation racing the kubelet's account", kubelet: []string{"b", "a", "c", "d"}, reconcile: reconcileRacingKubelet},
		{name: "first two swapped, reconciliation after the kubelet's account", kubelet: []string{"b", "a", "c", "d"}, reconcile: reconcileAfterKubelet},
		{name: "reverse order, reconciliation racing the kubelet's account", kubelet: []string{"d", "c", "b", "a"}, reconcile: reconcileRacingKubelet},
		{name: "interleaved cards, reconciliation racing the kubelet's account", kubelet: []string{"c", "a", "d", "b"}, reconcile: reconcileRacingKubelet},
		{name: "reverse order, plugin restart after a wrong guess", kubelet: []string{"d", "c", "b", "a"}, reconcile: reconcileAtEnd, restartAfter: 1},
		{name: "first two swapped, plugin restart after a wrong guess", kubelet: []string{"b", "a", "c", "d"}, reconcile: reconcileRacingKubelet, restartAfter: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sn := simtest.New(t, nodeName, "spec:2x40GiB:Test-GPU")
			store := sn.Store
			c0, c1 := sn.Cards[0], sn.Cards[1]
			assigned := map[string]podtest.Card{"a": c0, "b": c0, "c": c1, "d": c1}
			cl := &memCluster{arrival: map[types.UID]uint64{}}
			for i, name := range tc.arrival {
				cl.arrival[types.UID("uid-"+name)] = uint64(i)
			}
			byName := map[string]*corev1.Pod{}
			for _, name := range []string{"a", "b", "c", "d"} {
				p := podtest.Bound(nodeName, name, 1).GPU("main", 20).Assign(api.PhaseAssigned, assigned[name]).Obj()
				cl.pods = append(cl.pods, p)
				byName[name] = p
			}
			podres := &fakePodResources{}
			newPlugin := func() *Plugin {
				return New(Config{PluginDir: t.TempDir()}, store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
			}
			p := newPlugin()
			k := newKubeletModel(store, podres)

			for i, name := range tc.kubelet {
				if tc.restartAfter > 0 && i == tc.restartAfter {
					p = newPlugin()
				}
				pod := byName[name]
				before := map[string]bool{}
				for _, h := range k.held {
					before[h.Pod+"/"+h.Container] = true
				}
				ids, err := k.allocate(ctx, p, pod, pod.Spec.Containers[0])
				if err != nil {
					t.Fatalf("admission %d (pod %s, which has a valid assignment): %v", i+1, name, err)
				}
				h, ok := p.state.units.byDeviceIDs(ids)
				if ok && before[h.Pod+"/"+h.Container] {
					t.Errorf("admission %d (pod %s): the plugin took %s/%s for it, a container the kubelet had already admitted", i+1, name, h.Pod, h.Container)
				}
				if tc.exact && (!ok || h.Pod != name) {
					t.Errorf("admission %d (pod %s): the plugin took %s for it", i+1, name, h.Pod)
				}
				if tc.exact {
					card, _ := cardOfIDs(ids)
					if a := cl.record(t, name); a.Containers[0].CardUUID != card {
						t.Errorf("admission %d (pod %s) got %s; its record says %s on %s", i+1, name, card, a.Phase, a.Containers[0].CardUUID)
					}
				}
				if tc.reconcile == reconcileRacingKubelet {
					if err := p.Reconcile(ctx); err != nil {
						t.Fatal(err)
					}
				}
				k.commit(pod, "main", ids)
				if tc.reconcile == reconcileAfterKubelet {
					if err := p.Reconcile(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := p.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			for _, h := range k.held {
				card, err := cardOfIDs(h.IDs)
				if err != nil {
					t.Fatal(err)
				}
				a := cl.record(t, h.Pod)
				if a.Containers[0].CardUUID != card {
					t.Errorf("pod %s holds units of %s; its record says %s on %s", h.Pod, card, a.Phase, a.Containers[0].CardUUID)
				}
			}
		})
	}
}

func cardOfIDs(ids []string) (string, error) {
	card, _, err := api.ParseUnitID(ids[0])
	return card, err
}
