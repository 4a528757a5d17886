package plugin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/health"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/internal/podtest"
)

const nodeName = "gpu-node"

// fakeKubelet is the kubelet's Registration service on kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	reqs chan *pluginapi.RegisterRequest
	srv  *grpc.Server
	// hook, when set, runs first in every Register; its error is the answer.
	hookMu sync.Mutex
	hook   func(*pluginapi.RegisterRequest) error
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.hookMu.Lock()
	hook := k.hook
	k.hookMu.Unlock()
	if hook != nil {
		if err := hook(r); err != nil {
			return nil, err
		}
	}
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) setHook(h func(*pluginapi.RegisterRequest) error) {
	k.hookMu.Lock()
	defer k.hookMu.Unlock()
	k.hook = h
}

func startFakeKubelet(t testing.TB, dir string) *fakeKubelet {
	t.Helper()
	path := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{reqs: make(chan *pluginapi.RegisterRequest, 8), srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) waitRegistration(t testing.TB) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register with the kubelet within 10s")
		return nil
	}
}

// fakePodResources is the kubelet's PodResources API.
type fakePodResources struct {
	mu sync.Mutex
	hs []podresources.Holding
}

func (f *fakePodResources) set(hs ...podresources.Holding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hs = hs
}

// Get returns the holdings of the named pods.
func (f *fakePodResources) Get(_ context.Context, pods []*corev1.Pod) ([]podresources.Holding, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	asked := map[string]bool{}
	for _, p := range pods {
		asked[p.Namespace+"/"+p.Name] = true
	}
	var out []podresources.Holding
	for _, h := range f.hs {
		if asked[h.Namespace+"/"+h.Pod] {
			out = append(out, h)
		}
	}
	return out, nil
}

type harness struct {
	dir     string
	sim     *nvml.Simulator
	store   *inventory.Store
	client  *fake.Clientset
	plugin  *Plugin
	kubelet *fakeKubelet
	dp      pluginapi.DevicePluginClient
	hup     chan os.Signal
	podres  *fakePodResources
	cards   [2]podtest.Card
}

type setup struct {
	cfg    Config
	pods   func(cards [2]podtest.Card) []*corev1.Pod
	podres bool
	// wrap, if set, wraps the cluster the plugin sees.
	wrap func(Cluster) Cluster
	// health runs the NVML health monitor over the simulated cards.
	health bool
}

// newHarness runs a plugin over two simulated 8 GiB cards, a fake clientset
// and a fake kubelet, and dials its socket.
func newHarness(t testing.TB, s setup) *harness {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir, err := os.MkdirTemp("", "gdp") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{dir: dir, hup: make(chan os.Signal, 1)}
	sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
	gpus, sim := sn.GPUs, sn.Sim
	h.sim = sim
	h.cards = [2]podtest.Card(sn.Cards)
	h.store = sn.Store
	h.client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})
	podtest.APIServerPatches(h.client)
	if s.pods != nil {
		for _, p := range s.pods(h.cards) {
			if _, err := h.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl := cluster.New(h.client, nodeName)
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var podres podresources.Reader
	if s.podres {
		h.podres = &fakePodResources{}
		podres = h.podres
	}
	cfg := s.cfg
	cfg.PluginDir = dir
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = time.Hour // tests call Reconcile themselves
	}
	if cfg.ListAndWatchGrace == 0 {
		// The fake kubelet opens no ListAndWatch of its own; tests of that
		// watchdog set a grace.
		cfg.ListAndWatchGrace = -1
	}
	h.kubelet = startFakeKubelet(t, dir)
	var pc Cluster = cl
	if s.wrap != nil {
		pc = s.wrap(cl)
	}
	if s.health {
		go health.New(gpus, h.store, clock.RealClock{}, 0, ktesting.NewLogger(t, ktesting.NewConfig())).Run(ctx)
	}
	h.plugin = New(cfg, h.store, pc, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	done := make(chan error, 1)
	go func() { done <- h.plugin.Run(ctx, h.hup) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	h.kubelet.waitRegistration(t)
	conn, err := grpc.NewClient("unix://"+h.plugin.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.dp = pluginapi.NewDevicePluginClient(conn)
	return h
}

func unitIDs(card string, from, n int64) []string {
	out := make([]string, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, api.UnitID(card, i))
	}
	return out
}

func (h *harness) allocate(t *testing.T, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	t.Helper()
	resp, err := h.dp.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("%d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}

func (h *harness) mustAllocate(t *testing.T, ids []string) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	r, err := h.allocate(t, ids)
	if err != nil {
		t.Fatalf("Allocate(%v): %v", ids, err)
	}
	return r
}

// record reads a pod's assignment from the API server.
func (h *harness) record(t *testing.T, name string) api.Assignment {
	t.Helper()
	// The records an Allocate left to the record writer are written first.
	for deadline := time.Now().Add(30 * time.Second); !h.plugin.records.idle() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	p, err := h.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.DefaultNames().AssignmentFromPod(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// cardsOf is "container=cardIndex" for each container of the record, and its phase.
func cardsOf(a api.Assignment) []string {
	out := []string{string(a.Phase)}
	for _, c := range a.Containers {
		out = append(out, c.Name+"="+c.CardUUID)
	}
	return out
}

// mountedCard is the card a volume-mounts response exposes.
func mountedCard(t *testing.T, r *pluginapi.ContainerAllocateResponse) string {
	t.Helper()
	if len(r.Mounts) != 1 {
		t.Fatalf("%d mounts, want 1", len(r.Mounts))
	}
	return strings.TrimPrefix(r.Mounts[0].ContainerPath, api.VisibleDevicesVolumeRoot+"/")
}

func TestRegistration(t *testing.T) {
	h := newHarness(t, setup{})
	// newHarness consumed the first registration; SIGHUP must produce another.
	h.hup <- syscall.SIGHUP
	r := h.kubelet.waitRegistration(t)
	want := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "gpushare.sock", ResourceName: string(api.DefaultNames().ResourceName()), Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}}
	if r.Version != want.Version || r.Endpoint != want.Endpoint || r.ResourceName != want.ResourceName || !r.Options.GetGetPreferredAllocationAvailable() {
		t.Errorf("register request = %v, want %v", r, want)
	}
}

func TestReRegistersWhenKubeletRestarts(t *testing.T) {
	h := newHarness(t, setup{})
	// The kubelet restarts: it wipes the directory and re-creates kubelet.sock.
	h.kubelet.srv.Stop()
	_ = os.Remove(h.plugin.SocketPath())
	k2 := startFakeKubelet(t, h.dir)
	k2.waitRegistration(t)
	// The plugin serves again. (It may restart once more for a late
	// kubelet.sock event; a new registration follows each restart.)
	conn, err := grpc.NewClient("unix://"+h.plugin.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	waitFor(t, "the restarted plugin to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
		return err == nil
	})
}

// A restarting kubelet wipes the device-plugin directory. When the wipe
// removes a socket the plugin has just made, the kubelet's dial of it
// fails after 10 s, and the kubelet then deregisters whatever client the
// resource has, a newer registration included (server.connectClient). So
// the plugin must wait for the kubelet's answer before it registers again:
// here the fake kubelet answers the first registration after 1.5 s (its
// failed dial), and the plugin, whose own timeout is longer, registers
// again only after that. With a timeout shorter than the kubelet's answer
// (as the 10 s one was against the kubelet's 10 s dial) the second
// registration comes first and the test fails.
func TestRegistersAgainOnlyAfterTheKubeletAnswered(t *testing.T) {
	if DefaultRegisterTimeout <= kubeletDialTimeout+5*time.Second {
		t.Fatalf("DefaultRegisterTimeout %v does not outlast the kubelet's %v dial with room to spare", DefaultRegisterTimeout, kubeletDialTimeout)
	}
	const kubeletAnswersAfter = 1500 * time.Millisecond
	h := newHarness(t, setup{cfg: Config{RegisterTimeout: 3 * time.Second}})
	var (
		mu       sync.Mutex
		calls    int
		answered time.Time
	)
	again := make(chan time.Time, 1)
	h.kubelet.setHook(func(*pluginapi.RegisterRequest) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1: // the wipe removed the socket: the kubelet's dial fails late
			_ = os.Remove(h.plugin.SocketPath())
			time.Sleep(kubeletAnswersAfter)
			mu.Lock()
			answered = time.Now()
			mu.Unlock()
			return errors.New("failed to dial device plugin: context deadline exceeded")
		case 2:
			again <- time.Now()
		}
		return nil
	})
	h.hup <- syscall.SIGHUP // serve and register again
	select {
	case at := <-again:
		mu.Lock()
		a := answered
		mu.Unlock()
		if a.IsZero() || at.Before(a) {
			t.Fatalf("registered again at %v, before the kubelet answered the registration before (%v): the kubelet's clean-up of that one would drop the new client", at.Format(time.StampMicro), a.Format(time.StampMicro))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin did not register again after the failed registration")
	}
}

// The kubelet (v1.34) can disconnect a plugin that just registered: when a
// plugin restarts, the goroutine that handles the end of the old
// connection's ListAndWatch looks the client up by resource name, and if
// the new registration got there first it disconnects the new client. The
// kubelet then closes the new connection and stops the endpoint (every
// admission fails, the resource goes after 5 minutes). The plugin sees its
// ListAndWatch ended by the kubelet while it still serves, and serves and
// registers again.
func TestRegistersAgainWhenTheKubeletDropsListAndWatch(t *testing.T) {
	h := newHarness(t, setup{})
	conn, err := grpc.NewClient("unix://"+h.plugin.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recvDevices(t, s)
	_ = conn.Close() // what the kubelet's client Disconnect does
	h.kubelet.waitRegistration(t)
	// The new registration's ListAndWatch is served.
	conn2, err := grpc.NewClient("unix://"+h.plugin.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn2.Close() }()
	s2, err := pluginapi.NewDevicePluginClient(conn2).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recvDevices(t, s2); len(got) == 0 {
		t.Errorf("no devices after registering again")
	}
}

// A kubelet that accepted a registration but never opened ListAndWatch (kubelet
// v1.34 closes such a client when one restart made the plugin register twice in
// a few milliseconds) gets a new registration once the grace has passed; one
// that opens ListAndWatch in time keeps the registration it has.
func TestRegistersAgainWhenTheKubeletNeverOpensListAndWatch(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{ListAndWatchGrace: 300 * time.Millisecond}})
	// The harness's first registration was never followed by ListAndWatch:
	// a second one comes.
	h.kubelet.waitRegistration(t)
	// This time the kubelet opens ListAndWatch at once and gets the devices.
	conn, err := grpc.NewClient("unix://"+h.plugin.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	s, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := recvDevices(t, s); len(got) == 0 {
		t.Fatal("no devices after registering again")
	}
	// Watched within the grace: no further registration follows while the
	// stream is open (checked over several graces).
	select {
	case r := <-h.kubelet.reqs:
		t.Fatalf("registered again although ListAndWatch is open: %v", r)
	case <-time.After(4 * 300 * time.Millisecond):
	}
}

func recvDevices(t *testing.T, s pluginapi.DevicePlugin_ListAndWatchClient) map[string]int {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, d := range r.Devices {
		card, _, err := api.ParseUnitID(d.ID)
		if err != nil {
			t.Fatal(err)
		}
		count[card[:12]+" "+d.Health]++
	}
	return count
}

func TestListAndWatchFollowsHealth(t *testing.T) {
	h := newHarness(t, setup{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.dp.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := h.cards[0].UUID[:12], h.cards[1].UUID[:12]
	steps := []struct {
		name   string
		change func()
		want   map[string]int
	}{
		{"all units healthy at start", func() {}, map[string]int{c0 + " Healthy": 8, c1 + " Healthy": 8}},
		{"an XID on card 1 makes its units unhealthy", func() { h.store.SetUnhealthy(h.cards[1].UUID, "XID 79") }, map[string]int{c0 + " Healthy": 8, c1 + " Unhealthy": 8}},
		{"isolating card 0 by index", func() { h.store.SetIsolation(inventory.SourceAnnotation, api.Isolation{Index: []int{0}}) }, map[string]int{c0 + " Unhealthy": 8, c1 + " Unhealthy": 8}},
		{"recovery and lifting bring both back", func() {
			h.store.SetHealthy(h.cards[1].UUID)
			h.store.SetIsolation(inventory.SourceAnnotation, api.Isolation{})
		}, map[string]int{c0 + " Healthy": 8, c1 + " Healthy": 8}},
	}
	for _, st := range steps {
		st.change()
		var got map[string]int
		// A change may be sent in two messages (two store updates): read until it settles.
		deadline := time.Now().Add(5 * time.Second)
		for {
			got = recvDevices(t, s)
			if cmp.Equal(got, st.want) || time.Now().After(deadline) {
				break
			}
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: devices (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestGetPreferredAllocationSteersToAssignedCard(t *testing.T) {
	h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj()}
	}})
	avail := append(unitIDs(h.cards[0].UUID, 0, 8), unitIDs(h.cards[1].UUID, 0, 8)...)
	resp, err := h.dp.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(unitIDs(h.cards[1].UUID, 0, 3), resp.ContainerResponses[0].DeviceIDs); diff != "" {
		t.Errorf("preferred (-want +got):\n%s", diff)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestAllocate(t *testing.T) {
	t.Run("single container gets its card and the record becomes Allocated", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Obj()}
		}})
		r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 4))
		if got := mountedCard(t, r); got != h.cards[1].UUID {
			t.Errorf("mounted card %s, want %s", got, h.cards[1].UUID)
		}
		want := map[string]string{
			api.EnvNvidiaVisibleDevices: api.VisibleDevicesVolumeRoot,
			api.EnvMemoryUnits:          "4", api.EnvMemoryUnit: "GiB", api.EnvMemoryMiB: "4096",
			api.EnvCardMemoryMiB: "8192", api.EnvCardUUID: h.cards[1].UUID, api.EnvCardIndex: "1",
		}
		if diff := cmp.Diff(want, r.Envs); diff != "" {
			t.Errorf("envs (-want +got):\n%s", diff)
		}
		if r.Mounts[0].HostPath != "/dev/null" || !r.Mounts[0].ReadOnly {
			t.Errorf("mount = %v, want host /dev/null read-only", r.Mounts[0])
		}
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "p"))); diff != "" {
			t.Errorf("record (-want +got):\n%s", diff)
		}
	})

	t.Run("each container of a multi-container pod gets its own card", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("a", 2).Container("no-gpu").GPU("b", 2).Assign(api.PhaseAssigned, c[0], c[1]).Obj()}
		}})
		ra := h.mustAllocate(t, unitIDs(h.cards[0].UUID, 0, 2))
		if got := cardsOf(h.record(t, "p"))[0]; got != "Assigned" {
			t.Errorf("after the first container the phase is %s, want Assigned", got)
		}
		rb := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 2))
		if mountedCard(t, ra) != h.cards[0].UUID || mountedCard(t, rb) != h.cards[1].UUID {
			t.Errorf("containers got %s and %s, want card 0 then card 1", mountedCard(t, ra), mountedCard(t, rb))
		}
		if diff := cmp.Diff([]string{"Allocated", "a=" + h.cards[0].UUID, "b=" + h.cards[1].UUID}, cardsOf(h.record(t, "p"))); diff != "" {
			t.Errorf("record (-want +got):\n%s", diff)
		}
	})

	t.Run("two same-size pods admitted in swapped order: no card overbooked, records follow reality", func(t *testing.T) {
		h := newHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "older", 1).GPU("c", 6).Assign(api.PhaseAssigned, c[0]).Obj(),
				podtest.Bound(nodeName, "younger", 2).GPU("c", 6).Assign(api.PhaseAssigned, c[1]).Obj(),
			}
		}})
		// The kubelet hands out card 1 first, then card 0 (6 of 8 units each:
		// the two can never share a card).
		r1 := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 6))
		r2 := h.mustAllocate(t, unitIDs(h.cards[0].UUID, 0, 6))
		if mountedCard(t, r1) == mountedCard(t, r2) {
			t.Fatalf("both containers got card %s", mountedCard(t, r1))
		}
		// The plugin's guess: the queue's head (older) got the first offer.
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "older"))); diff != "" {
			t.Errorf("older record after Allocate (-want +got):\n%s", diff)
		}
		// The kubelet's PodResources says the younger pod got card 1: reconcile.
		h.podres.set(
			podresources.Holding{Namespace: "ns", Pod: "younger", Container: "c", IDs: unitIDs(h.cards[1].UUID, 0, 6)},
			podresources.Holding{Namespace: "ns", Pod: "older", Container: "c", IDs: unitIDs(h.cards[0].UUID, 0, 6)},
		)
		waitFor(t, "the informer to see the records", func() bool {
			pods, _ := h.plugin.cluster.Pods()
			n := 0
			for _, p := range pods {
				if a, err := api.DefaultNames().AssignmentFromPod(p); err == nil && a.Phase == api.PhaseAllocated {
					n++
				}
			}
			return n == 2
		})
		if err := h.plugin.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "older"))); diff != "" {
			t.Errorf("older record after reconcile (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "younger"))); diff != "" {
			t.Errorf("younger record after reconcile (-want +got):\n%s", diff)
		}
	})

	t.Run("the kubelet's truth arriving between two same-size admissions reopens the wrongly guessed pod", func(t *testing.T) {
		h := newHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "older", 1).GPU("c", 6).Assign(api.PhaseAssigned, c[0]).Obj(),
				podtest.Bound(nodeName, "younger", 2).GPU("c", 6).Assign(api.PhaseAssigned, c[1]).Obj(),
			}
		}})
		// The kubelet admits the younger pod first, on card 0; the plugin guesses "older".
		first := unitIDs(h.cards[0].UUID, 0, 6)
		h.mustAllocate(t, first)
		// The guess names older's planned card: with the kubelet's account
		// nothing is written (the record stays the plan).
		if diff := cmp.Diff([]string{"Assigned", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "older"))); diff != "" {
			t.Errorf("older's record after the guess (-want +got):\n%s", diff)
		}
		// Before the kubelet admits "older", PodResources shows who really holds card 0.
		h.podres.set(podresources.Holding{Namespace: "ns", Pod: "younger", Container: "c", IDs: first})
		if err := h.plugin.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Assigned", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "older"))); diff != "" {
			t.Errorf("older's record after reconcile (-want +got):\n%s", diff)
		}
		// Now the kubelet admits "older": only card 1 has room, and it is older's.
		h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 6))
		// Younger's correction swapped older's plan onto card 1: right, so left Assigned.
		if diff := cmp.Diff([]string{"Assigned", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "older"))); diff != "" {
			t.Errorf("older (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "younger"))); diff != "" {
			t.Errorf("younger (-want +got):\n%s", diff)
		}
	})

	t.Run("a pod without assignment is refused with a reason, and the next pod is not blocked", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "by-hand", 1).GPU("c", 2).Obj(),
				podtest.Bound(nodeName, "scheduled", 2).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
			}
		}})
		_, err := h.allocate(t, unitIDs(h.cards[0].UUID, 0, 2))
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("Allocate for the bypass pod: %v, want FailedPrecondition", err)
		}
		want := "pod ns/by-hand has no gpushare assignment: pods requesting example.com/gpu-mem must be scheduled by gpushare-scheduler"
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("message %q does not say %q", status.Convert(err).Message(), want)
		}
		r := h.mustAllocate(t, unitIDs(h.cards[0].UUID, 0, 2))
		if mountedCard(t, r) != h.cards[0].UUID {
			t.Errorf("scheduled pod got %s", mountedCard(t, r))
		}
		if got := cardsOf(h.record(t, "scheduled"))[0]; got != "Allocated" {
			t.Errorf("scheduled pod's record is %s, want Allocated", got)
		}
	})

	t.Run("a retried Allocate for the same container gives the same card and consumes no queue entry", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "first", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
				podtest.Bound(nodeName, "second", 2).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj(),
			}
		}})
		ids := unitIDs(h.cards[0].UUID, 0, 2)
		r1 := h.mustAllocate(t, ids)
		r2 := h.mustAllocate(t, ids)
		if diff := cmp.Diff(r1.Envs, r2.Envs); diff != "" {
			t.Errorf("retry differs (-first +retry):\n%s", diff)
		}
		if got := cardsOf(h.record(t, "second"))[0]; got != "Assigned" {
			t.Fatalf("the retry consumed the second pod's entry (its record is %s)", got)
		}
		h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 2))
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[1].UUID}, cardsOf(h.record(t, "second"))); diff != "" {
			t.Errorf("second record (-want +got):\n%s", diff)
		}
	})

	t.Run("units freed by a finished pod and handed to the next pod are not taken for a retry", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				podtest.Bound(nodeName, "first", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
				podtest.Bound(nodeName, "next", 2).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
			}
		}})
		ids := unitIDs(h.cards[0].UUID, 0, 2)
		h.mustAllocate(t, ids)
		first, err := h.client.CoreV1().Pods("ns").Get(context.Background(), "first", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first.Status.Phase = corev1.PodSucceeded
		if _, err := h.client.CoreV1().Pods("ns").UpdateStatus(context.Background(), first, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the informer to see the first pod finished", func() bool { return !holds(h.plugin, first.UID) })
		h.mustAllocate(t, ids) // the kubelet reuses the freed units for "next"
		if diff := cmp.Diff([]string{"Allocated", "c=" + h.cards[0].UUID}, cardsOf(h.record(t, "next"))); diff != "" {
			t.Errorf("next's record (-want +got):\n%s", diff)
		}
	})

	t.Run("after a plugin restart a retry is recognised through PodResources", func(t *testing.T) {
		h := newHarness(t, setup{podres: true, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{
				// "pending" is older: without recognising the retry, the
				// plugin would hand its queue entry to the retried call.
				podtest.Bound(nodeName, "pending", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj(),
				podtest.Bound(nodeName, "running", 2).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
			}
		}})
		// The kubelet holds units of card 0 for "running" (allocated by a previous plugin process).
		ids := unitIDs(h.cards[0].UUID, 2, 2)
		h.podres.set(podresources.Holding{Namespace: "ns", Pod: "running", Container: "c", IDs: ids})
		r := h.mustAllocate(t, ids)
		if mountedCard(t, r) != h.cards[0].UUID {
			t.Errorf("retry got %s, want card 0", mountedCard(t, r))
		}
		if got := cardsOf(h.record(t, "pending"))[0]; got != "Assigned" {
			t.Errorf("the retry consumed the pending pod's entry (its record is %s)", got)
		}
	})

	t.Run("units of two cards are refused", func(t *testing.T) {
		h := newHarness(t, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj()}
		}})
		_, err := h.allocate(t, append(unitIDs(h.cards[0].UUID, 0, 1), unitIDs(h.cards[1].UUID, 0, 1)...))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("err = %v, want InvalidArgument", err)
		}
	})
}

func TestContainerResponseStrategies(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantEnv   func(h *harness) string
		wantMount func(h *harness) string
	}{
		{
			name:      "volume-mounts with uuid mounts /dev/null at the card's UUID",
			cfg:       Config{Config: response.Config{Strategy: response.StrategyVolumeMounts, DeviceIDStrategy: response.DeviceIDUUID}},
			wantEnv:   func(*harness) string { return api.VisibleDevicesVolumeRoot },
			wantMount: func(h *harness) string { return api.VisibleDevicesVolumeRoot + "/" + h.cards[1].UUID },
		},
		{
			name:      "volume-mounts with index mounts /dev/null at the card's index",
			cfg:       Config{Config: response.Config{Strategy: response.StrategyVolumeMounts, DeviceIDStrategy: response.DeviceIDIndex}},
			wantEnv:   func(*harness) string { return api.VisibleDevicesVolumeRoot },
			wantMount: func(*harness) string { return api.VisibleDevicesVolumeRoot + "/1" },
		},
		{
			name:      "envvar with uuid names the card's UUID and mounts nothing",
			cfg:       Config{Config: response.Config{Strategy: response.StrategyEnvvar, DeviceIDStrategy: response.DeviceIDUUID}},
			wantEnv:   func(h *harness) string { return h.cards[1].UUID },
			wantMount: func(*harness) string { return "" },
		},
		{
			name:      "envvar with index names the card's index",
			cfg:       Config{Config: response.Config{Strategy: response.StrategyEnvvar, DeviceIDStrategy: response.DeviceIDIndex}},
			wantEnv:   func(*harness) string { return "1" },
			wantMount: func(*harness) string { return "" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{cfg: tt.cfg, pods: func(c [2]podtest.Card) []*corev1.Pod {
				return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 1).Assign(api.PhaseAssigned, c[1]).Obj()}
			}})
			r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 7, 1))
			if got := r.Envs[api.EnvNvidiaVisibleDevices]; got != tt.wantEnv(h) {
				t.Errorf("%s = %q, want %q", api.EnvNvidiaVisibleDevices, got, tt.wantEnv(h))
			}
			mount := ""
			if len(r.Mounts) > 0 {
				mount = r.Mounts[0].ContainerPath
			}
			if mount != tt.wantMount(h) {
				t.Errorf("mount = %q, want %q", mount, tt.wantMount(h))
			}
		})
	}
}

func TestListAndWatchMarksUnitsUnhealthyOnXID(t *testing.T) {
	h := newHarness(t, setup{health: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.dp.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := h.cards[0].UUID[:12], h.cards[1].UUID[:12]
	if got, want := recvDevices(t, s), map[string]int{c0 + " Healthy": 8, c1 + " Healthy": 8}; !cmp.Equal(got, want) {
		t.Fatalf("at start: %v, want %v", got, want)
	}
	h.sim.InjectXID(0, 79) // through NVML's event set and the health monitor
	want := map[string]int{c0 + " Unhealthy": 8, c1 + " Healthy": 8}
	if got := recvDevices(t, s); !cmp.Equal(got, want) {
		t.Errorf("after XID 79 on card 0: %v, want %v", got, want)
	}
}

// lateCluster hides the pods until Allocate has looked once and found nothing.
type lateCluster struct {
	Cluster
	mu     sync.Mutex
	looked int
}

// CacheBehind: the API server has the pods the first look did not show.
func (l *lateCluster) CacheBehind(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.looked <= 1, nil
}

func (l *lateCluster) Pods() ([]*corev1.Pod, error) {
	l.mu.Lock()
	l.looked++
	n := l.looked
	l.mu.Unlock()
	if n <= 1 {
		return nil, nil
	}
	return l.Cluster.Pods()
}

// caughtUpCluster is a pod cache that lacks the pods at the first look and
// has caught up by the time the plugin asks whether it is behind the API
// server (CacheBehind reads the cache after the API server).
type caughtUpCluster struct{ lateCluster }

func (c *caughtUpCluster) CacheBehind(context.Context) (bool, error) { return false, nil }

// A cache that catches up between the plugin's look and its question to the
// API server is looked at once more: the kubelet gets the assigned card, not
// a best-fit guess.
func TestGetPreferredAllocationLooksAgainWhenTheCacheCaughtUp(t *testing.T) {
	checkPrefersTheAssignedCard(t, func(c Cluster) Cluster { return &caughtUpCluster{lateCluster{Cluster: c}} })
}

// checkPrefersTheAssignedCard asks GetPreferredAllocation, through the pod
// cache wrap makes, for 3 units of a pod assigned card 1 with units of both
// cards available, and wants card 1's.
func checkPrefersTheAssignedCard(t *testing.T, wrap func(Cluster) Cluster) {
	t.Helper()
	h := newHarness(t, setup{
		cfg:  Config{AllocateWait: 5 * time.Second},
		wrap: wrap,
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj()}
		},
	})
	avail := append(unitIDs(h.cards[0].UUID, 0, 8), unitIDs(h.cards[1].UUID, 0, 8)...)
	resp, err := h.dp.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(unitIDs(h.cards[1].UUID, 0, 3), resp.ContainerResponses[0].DeviceIDs); diff != "" {
		t.Errorf("preferred (-want +got):\n%s", diff)
	}
}

func TestAllocateWaitsForAPodTheKubeletSawFirst(t *testing.T) {
	var late *lateCluster
	h := newHarness(t, setup{
		cfg:  Config{AllocateWait: 5 * time.Second},
		wrap: func(c Cluster) Cluster { late = &lateCluster{Cluster: c}; return late },
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj()}
		},
	})
	r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 2))
	if mountedCard(t, r) != h.cards[1].UUID {
		t.Errorf("got %s", mountedCard(t, r))
	}
	late.mu.Lock()
	defer late.mu.Unlock()
	if late.looked < 2 {
		t.Errorf("the pod cache was read %d times: Allocate did not have to wait", late.looked)
	}
}

// The kubelet may ask GetPreferredAllocation before the pod reaches the
// plugin's informer (seen in e2e: the pod that chose card 1 was offered
// card 0's units, best fit, and Allocate had to correct its record). Like
// Allocate, GetPreferredAllocation waits for the pod and steers to its card.
func TestGetPreferredAllocationWaitsForAPodTheKubeletSawFirst(t *testing.T) {
	var late *lateCluster
	checkPrefersTheAssignedCard(t, func(c Cluster) Cluster { late = &lateCluster{Cluster: c}; return late })
	late.mu.Lock()
	defer late.mu.Unlock()
	if late.looked < 2 {
		t.Errorf("the pod cache was read %d times: GetPreferredAllocation did not have to wait", late.looked)
	}
}

// holds reports whether the kubelet may still call Allocate for the pod
// with this UID, as the plugin's pod cache shows it (api.MayStartContainers).
func holds(p *Plugin, uid types.UID) bool {
	v, err := p.view()
	if err != nil {
		return false
	}
	return api.MayStartContainers(v.byUID[uid])
}

// idle reports whether every queued record has been written (or given up).
func (q *recordQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) == 0 && !q.writing
}
