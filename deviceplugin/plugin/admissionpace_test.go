package plugin

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/podrestest"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// countingCluster counts the calls that asked the API server whether the
// pod cache is behind (the wait for a pod the kubelet saw first).
type countingCluster struct {
	*memCluster
	behind atomic.Int64
}

func (c *countingCluster) CacheBehind(ctx context.Context) (bool, error) {
	c.behind.Add(1)
	return c.memCluster.CacheBehind(ctx)
}

// A burst of same-size GPU pods bound to one node at once, admitted by the
// kubelet one at a time through the real PodResources client
// (podresources.Kubelet against a PodResources server that counts calls):
// each admission call (GetPreferredAllocation, Allocate, PreStartContainer)
// reads the kubelet's account with at most a few Gets whatever the number of
// pods on the node, and none waits for or asks the API server about a pod
// the cache already has. Reading every pod of the node per call made a
// burst of N pods cost O(N²) Gets, paced under the kubelet's rate limit: a
// node admitted one GPU pod every few seconds. The count, not the time, is
// checked, so the test does not depend on the machine's speed.
func TestBurstAdmissionReadsTheAccountInConstantGets(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lag: how many admissions later the pod's status shows it admitted.
		lag int
		// swap: the kubelet admits each pair of pods in the other order
		// than the plugin's queue; reverse: in the reverse order (Gets are
		// then not bounded: an admission reads on until it finds the pod).
		swap, reverse bool
	}{
		{name: "status follows at once", lag: 0},
		{name: "status three admissions behind", lag: 3},
		{name: "kubelet order differs in pairs, status behind", lag: 2, swap: true},
		{name: "kubelet order reversed: every decision still names the pod admitted", lag: 1, reverse: true},
	} {
		t.Run(tc.name, func(t *testing.T) { testBurstPace(t, tc.lag, tc.swap, tc.reverse) })
	}
}

func testBurstPace(t *testing.T, lag int, swap, reverse bool) {
	const pods, size = 24, 4
	ctx := context.Background()
	sn := simtest.New(t, nodeName, "spec:3x32GiB:Test-GPU")
	res := string(api.DefaultNames().ResourceName())
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	var names []string
	planned := map[string]string{}
	for i := range pods {
		name := fmt.Sprintf("p%02d", i)
		names = append(names, name)
		planned[name] = sn.Cards[i%3].UUID
		mem.arrival[types.UID("uid-"+name)] = uint64(i)
		mem.pods = append(mem.pods, podtest.Bound(nodeName, name, 1).GPU("main", size).Assign(api.PhaseAssigned, sn.Cards[i%3]).Obj())
	}
	cl := &countingCluster{memCluster: mem}
	srv := podrestest.Start(t, res)
	var reads, maxGets int
	podres := podresources.NewKubelet(srv.Socket, res, mem.Arrival, func(n int) { reads++; maxGets = max(maxGets, n) })
	p := New(Config{PluginDir: t.TempDir()}, sn.Store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	k := newKubeletModel(sn.Store, &fakePodResources{})

	order := append([]string(nil), names...)
	if swap {
		for i := 0; i+1 < len(order); i += 2 {
			order[i], order[i+1] = order[i+1], order[i]
		}
	}
	if reverse {
		slices.Reverse(order)
	}
	byName := map[string]*corev1.Pod{}
	for _, pod := range mem.pods {
		byName[pod.Name] = pod
	}
	admitted := func(name string) {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		for i, pod := range mem.pods {
			if pod.Name == name {
				mem.pods[i] = pod.DeepCopy()
				mem.pods[i].Status.Phase = corev1.PodRunning
			}
		}
	}
	calls := 0
	held := map[string]string{} // pod → card of its units
	for i, name := range order {
		pod := byName[name]
		srv.Know(pod.Namespace, name) // the kubelet's pod manager has it: it is being admitted
		ids, err := k.allocate(ctx, p, pod, pod.Spec.Containers[0])
		if err != nil {
			t.Fatalf("admission %d (%s): %v", i+1, name, err)
		}
		if h, ok := p.state.units.byDeviceIDs(ids); !ok || h.Pod != name {
			t.Errorf("admission %d (%s): the plugin took %s for it", i+1, name, h.Pod)
		}
		srv.Hold(pod.Namespace, name, "main", ids...)
		if held[name], err = cardOfIDs(ids); err != nil {
			t.Fatal(err)
		}
		if _, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
			t.Fatalf("PreStartContainer of %s: %v", name, err)
		}
		calls += 3
		if i >= lag {
			admitted(order[i-lag])
		}
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		a := mem.record(t, name)
		// Allocated only where the plugin corrected the card: a right card
		// is left Assigned (the kubelet's account is read).
		if a.Containers[0].CardUUID != held[name] || (a.Phase == api.PhaseAllocated) != (held[name] != planned[name]) {
			t.Errorf("pod %s holds units of %s (the extender planned %s); its record says %s on %s; want that card, Allocated only if corrected", name, held[name], planned[name], a.Phase, a.Containers[0].CardUUID)
		}
	}
	list, gets := srv.Calls()
	if list != 0 {
		t.Errorf("PodResources List called %d times; want never", list)
	}
	t.Logf("%d pods, %d admission calls: %d PodResources Gets in %d reads (most in one read: %d), %d CacheBehind calls", pods, calls, gets, reads, maxGets, cl.behind.Load())
	// A read asks the pod being admitted, and once each pod the kubelet
	// completed since the last read: a handful, never the node's pods.
	if reverse {
		return
	}
	if maxGets > 3 {
		t.Errorf("one read of the kubelet's account made %d PodResources Gets; want at most 3 (the pods being admitted, not the %d pods of the node)", maxGets, pods)
	}
	// One Get a pod: the admission asks about the pod it admits; the pod it
	// admitted before is remembered from its Allocate (Allocated), and the
	// container's PreStartContainer answers from that memory. Where the
	// kubelet's order differs from the plugin's guess, half the admissions
	// first ask about the pod it guessed.
	want := pods
	if swap {
		want = pods * 3 / 2
	}
	if gets > want {
		t.Errorf("%d admission calls (%d pods) made %d PodResources Gets; want at most %d: each admission must cost one Get, not O(pods on the node), nor a Get for what its own Allocate told", calls, pods, gets, want)
	}
	if n := cl.behind.Load(); n != 0 {
		t.Errorf("%d admission calls asked the API server whether the cache was behind although every pod was in the cache; want 0", n)
	}
}

// heldWrites is an API server whose record writes wait for release.
type heldWrites struct {
	*memCluster
	release chan struct{}
	writes  atomic.Int64
}

func (c *heldWrites) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	<-c.release // whatever the write's own timeout: the API server has not answered
	c.writes.Add(1)
	return c.memCluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}

// The kubelet admits one pod at a time, its sync loop blocked on Allocate:
// an Allocate of units answers without waiting for the API server, and the
// record writer writes the record after it; PreStartContainer, which the
// kubelet calls before it starts the container, waits for the record.
func TestAllocateOfUnitsDoesNotWaitForTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sn := simtest.New(t, nodeName, "spec:1x16GiB:Test-GPU")
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	mem.pods = append(mem.pods, podtest.Bound(nodeName, "a", 1).GPU("main", 4).Assign(api.PhaseAssigned, sn.Cards[0]).Obj())
	cl := &heldWrites{memCluster: mem, release: make(chan struct{})}
	p := New(Config{PluginDir: t.TempDir()}, sn.Store, cl, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	go p.rec.runRecordWriter(ctx)
	waitServing(t, p)
	ids := unitIDs(sn.Cards[0].UUID, 0, 4)
	done := make(chan error, 1)
	go func() {
		_, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Allocate waited for the API server's record write: the kubelet's admission of the node's next pod waits with it")
	}
	if a := mem.record(t, "a"); a.Phase != api.PhaseAssigned {
		t.Fatalf("record written before the API server answered: %s", a.Phase)
	}
	pre := make(chan error, 1)
	go func() {
		_, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids})
		pre <- err
	}()
	close(cl.release)
	if err := <-pre; err != nil {
		t.Fatal(err)
	}
	if a := mem.record(t, "a"); a.Phase != api.PhaseAllocated || a.Containers[0].CardUUID != sn.Cards[0].UUID {
		t.Errorf("after PreStartContainer the record says %s on %s; want Allocated on the card", a.Phase, a.Containers[0].CardUUID)
	}
}

func waitServing(t *testing.T, p *Plugin) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.records.mu.Lock()
		on := p.records.serving
		p.records.mu.Unlock()
		if on {
			return
		}
	}
	t.Fatal("the record writer did not start")
}

// concurrentWrites is an API server whose record writes each wait until
// want writes are in flight at once (or two seconds pass).
type concurrentWrites struct {
	*memCluster
	want     int64
	inFlight atomic.Int64
	most     atomic.Int64
	all      chan struct{}
	once     sync.Once
}

func (c *concurrentWrites) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	if n >= c.want {
		c.once.Do(func() { close(c.all) })
	}
	select {
	case <-c.all:
	case <-time.After(2 * time.Second):
	}
	return c.memCluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}

// The records a burst's Allocates queue are written several at a time: one
// API round trip each, every container's PreStartContainer waiting for its
// pod's, so a queue written one by one made the node's last container wait
// for all the others' writes.
func TestQueuedRecordsAreWrittenConcurrently(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sn := simtest.New(t, nodeName, "spec:1x16GiB:Test-GPU")
	mem := &memCluster{arrival: map[types.UID]uint64{}}
	var refs []podRef
	for i := range 4 {
		pod := podtest.Bound(nodeName, fmt.Sprintf("p%d", i), i).GPU("main", 4).Assign(api.PhaseAssigned, sn.Cards[0]).Obj()
		mem.pods = append(mem.pods, pod)
		refs = append(refs, podRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID})
	}
	cl := &concurrentWrites{memCluster: mem, want: 4, all: make(chan struct{})}
	p := New(Config{PluginDir: t.TempDir()}, sn.Store, cl, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	go p.rec.runRecordWriter(ctx)
	waitServing(t, p)
	start := time.Now()
	p.rec.queueRecords(ctx, refs)
	for !p.records.idle() {
		time.Sleep(time.Millisecond)
	}
	if most := cl.most.Load(); most < 4 {
		t.Errorf("the record writer had at most %d of 4 queued writes in flight at once (%v); want all 4", most, time.Since(start).Round(time.Second))
	}
}

// hiddenCluster hides the pods until reveal, as a pod cache behind the API server does: Pods
// shows none, CacheBehind says behind, and PodsChanged is closed at the reveal (the informer
// delivering the pods).
type hiddenCluster struct {
	Cluster
	mu      sync.Mutex
	hidden  bool
	looked  int
	changed chan struct{}
}

func (c *hiddenCluster) Pods() ([]*corev1.Pod, error) {
	c.mu.Lock()
	hidden := c.hidden
	c.looked++
	c.mu.Unlock()
	if hidden {
		return nil, nil
	}
	return c.Cluster.Pods()
}

func (c *hiddenCluster) CacheBehind(context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hidden, nil
}

func (c *hiddenCluster) PodsChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hidden {
		return c.changed
	}
	return c.Cluster.PodsChanged()
}

func (c *hiddenCluster) reveal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hidden = false
	close(c.changed)
}

func (c *hiddenCluster) looks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.looked
}

// An Allocate waiting for a pod the kubelet saw first answers as the pod cache delivers it, not
// at the next poll: the clock here never moves, so a wait that only polls never ends.
func TestAllocateWaitEndsWhenThePodReachesTheCache(t *testing.T) {
	hidden := &hiddenCluster{hidden: true, changed: make(chan struct{})}
	h := newHarness(t, setup{
		cfg:  Config{AllocateWait: 5 * time.Second, Clock: testingclock.NewFakeClock(time.Now())},
		wrap: func(c Cluster) Cluster { hidden.Cluster = c; return hidden },
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj()}
		},
	})
	type result struct {
		r   *pluginapi.ContainerAllocateResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := h.allocate(t, unitIDs(h.cards[1].UUID, 0, 2))
		done <- result{r, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); hidden.looks() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Allocate never looked at the pod cache")
		}
	}
	hidden.reveal()
	select {
	case got := <-done:
		if got.err != nil {
			t.Fatalf("Allocate: %v", got.err)
		}
		if mountedCard(t, got.r) != h.cards[1].UUID {
			t.Errorf("got card %s, want the assigned card 1", mountedCard(t, got.r))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Allocate still waits 10 s after the pod reached the cache: it waits for a poll, not for the cache")
	}
}

// A container's PreStartContainer after the record writer wrote its pod's record asks the API
// server nothing: the plugin remembers what it wrote, and only it writes a record after the
// bind. (It read the pod again to confirm, or its write conflicted with the writer's.) Only the
// call's own writes count: the reconciler an Allocate wakes may read meanwhile.
func TestPreStartAfterTheRecordWriterAsksTheAPIServerNothing(t *testing.T) {
	calls := &markedCalls{}
	h := newHarness(t, setup{
		wrap: func(c Cluster) Cluster { calls.Cluster = c; return calls },
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj()}
		},
	})
	ids := unitIDs(h.cards[1].UUID, 0, 2)
	h.mustAllocate(t, ids)
	if a := h.record(t, "p"); a.Phase != api.PhaseAllocated {
		t.Fatalf("after Allocate the record writer left phase %s, want Allocated", a.Phase)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), markKey, "prestart")
	if _, err := h.dp.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
		t.Fatal(err)
	}
	if n := calls.marked.Load(); n != 0 {
		t.Errorf("PreStartContainer of a container whose record is written wrote (or read) the record %d times through the API server; want none", n)
	}
	if a := h.record(t, "p"); a.Phase != api.PhaseAllocated || a.Containers[0].CardUUID != h.cards[1].UUID {
		t.Errorf("record after PreStartContainer: %s on %s", a.Phase, a.Containers[0].CardUUID)
	}
}

// markKey is the gRPC metadata a test's call carries so that markedCalls counts what it does.
const markKey = "gpushare-test-call"

// markedCalls counts the record updates made for a gRPC call that carries markKey.
type markedCalls struct {
	Cluster
	marked atomic.Int64
}

func (c *markedCalls) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(markKey)) > 0 {
		c.marked.Add(1)
	}
	return c.Cluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}

// A container whose record already names the card it holds starts without waiting for the API
// server: only the record's phase is left, to the record writer. A container whose record names
// another card (the kubelet gave units of another card than the extender assigned) waits until
// its record names the card it holds.
func TestPreStartWaitsForTheAPIServerOnlyWhenTheRecordNamesAnotherCard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		assigned int // the card the extender assigned; the kubelet gives units of card 1
		wait     bool
	}{{"record names the card", 1, false}, {"record names another card", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedUpdates{gate: make(chan struct{}), prestart: make(chan struct{}, 1)}
			h := newHarness(t, setup{
				podres: true,
				wrap:   func(c Cluster) Cluster { g.Cluster = c; return g },
				pods: func(c [2]podtest.Card) []*corev1.Pod {
					return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[tc.assigned]).Obj()}
				},
			})
			ids := unitIDs(h.cards[1].UUID, 0, 2)
			h.mustAllocate(t, ids) // its record write waits at the gate
			h.podres.set(podresources.Holding{Namespace: "ns", Pod: "p", Container: "c", IDs: ids})
			done := make(chan error, 1)
			go func() {
				ctx := metadata.AppendToOutgoingContext(context.Background(), markKey, "prestart")
				_, err := h.dp.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids})
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if tc.wait {
					t.Fatalf("PreStartContainer returned while the record still names card %s, not card %s the container holds", h.cards[0].UUID, h.cards[1].UUID)
				}
			case <-g.prestart:
				if !tc.wait {
					t.Fatal("PreStartContainer of a container whose record names its card waits for the API server")
				}
				close(g.gate)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("PreStartContainer neither returned nor wrote the record in 30 s")
			}
			if !tc.wait {
				close(g.gate)
			}
			// Allocated where corrected; a record that names the card is left
			// Assigned (the kubelet's account is read).
			want := map[bool]api.AssignmentPhase{true: api.PhaseAllocated, false: api.PhaseAssigned}[tc.wait]
			if a := h.record(t, "p"); a.Phase != want || a.Containers[0].CardUUID != h.cards[1].UUID {
				t.Errorf("record: %s on %s, want %s on %s", a.Phase, a.Containers[0].CardUUID, want, h.cards[1].UUID)
			}
		})
	}
}

// gatedUpdates holds every record update until gate closes, and says when one of a call marked
// with markKey arrives.
type gatedUpdates struct {
	Cluster
	gate     chan struct{}
	prestart chan struct{}
}

func (g *gatedUpdates) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(markKey)) > 0 {
		select {
		case g.prestart <- struct{}{}:
		default:
		}
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Cluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}
