package plugin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// slowCluster holds every record write for one pod until release closes.
type slowCluster struct {
	*memCluster
	slowPod string
	entered chan struct{}
	release chan struct{}
}

func (c *slowCluster) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	if name == c.slowPod {
		select {
		case c.entered <- struct{}{}:
		default:
		}
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.memCluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}

// slowPodResources holds its first read until release closes.
type slowPodResources struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func (s *slowPodResources) Get(ctx context.Context, _ []*corev1.Pod) ([]podresources.Holding, error) {
	if s.calls.Add(1) > 1 {
		return nil, nil
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

// twoCards is a store of two simulated 8 GiB cards.
func twoCards(t *testing.T) (*inventory.Store, [2]podtest.Card) {
	t.Helper()
	sn := simtest.New(t, nodeName, "spec:2x8GiB:Test-GPU")
	store := sn.Store
	return store, [2]podtest.Card(sn.Cards)
}

func allocateIDs(ctx context.Context, p *Plugin, ids []string) error {
	_, err := p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	return err
}

// No lock is held across an API or gRPC call: while one Allocate waits on a
// slow record PATCH, or on a slow PodResources read, another Allocate on the
// node is decided and answered (issue 12: allocMu spanned both, up to ~20 s
// for every other Allocate on the node).
func TestASlowCallDoesNotBlockAnotherAllocate(t *testing.T) {
	for _, slow := range []string{"record PATCH", "PodResources read"} {
		t.Run(slow, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store, c := twoCards(t)
			mem := &memCluster{pods: []*corev1.Pod{
				podtest.Bound(nodeName, "slow", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[0]).Obj(),
				podtest.Bound(nodeName, "fast", 2).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj(),
			}}
			var cl Cluster = mem
			var podres podresources.Reader
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			if slow == "record PATCH" {
				cl = &slowCluster{memCluster: mem, slowPod: "slow", entered: entered, release: release}
			}
			if slow == "PodResources read" {
				podres = &slowPodResources{entered: entered, release: release}
			}
			p := New(Config{PluginDir: t.TempDir()}, store, cl, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
			first := make(chan error, 1)
			go func() { first <- allocateIDs(ctx, p, unitIDs(c[0].UUID, 0, 2)) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatalf("the first Allocate never reached its %s", slow)
			}
			second := make(chan error, 1)
			go func() { second <- allocateIDs(ctx, p, unitIDs(c[1].UUID, 0, 3)) }()
			select {
			case err := <-second:
				if err != nil {
					t.Fatalf("second Allocate: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("a second Allocate waited more than 5 s behind the first one's %s", slow)
			}
			if got := mem.record(t, "fast"); got.Containers[0].CardUUID != c[1].UUID {
				t.Errorf("fast's record: %s on %s, want card 1", got.Phase, got.Containers[0].CardUUID)
			}
		})
	}
}

// Allocate waits for a pod the kubelet saw before the informer on the
// plugin's clock: with a fake clock the wait ends when the clock passes
// --allocate-wait, not before, and the refusal says no pod is pending.
func TestAllocateWaitsOnTheInjectedClock(t *testing.T) {
	store, c := twoCards(t)
	clk := testingclock.NewFakeClock(time.Now())
	mem := &memCluster{behind: true} // the pod is on the API server, not yet in the cache
	p := New(Config{PluginDir: t.TempDir(), AllocateWait: 2 * time.Second, Clock: clk}, store, mem, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	done := make(chan error, 1)
	go func() { done <- allocateIDs(context.Background(), p, unitIDs(c[0].UUID, 0, 2)) }()
	for waited := time.Duration(0); waited < 2*time.Second; waited += allocatePoll {
		waitFor(t, "Allocate to wait on the clock", clk.HasWaiters)
		select {
		case err := <-done:
			t.Fatalf("Allocate returned after %v of a 2 s wait: %v", waited, err)
		default:
		}
		clk.Step(allocatePoll)
	}
	select {
	case err := <-done:
		if status.Code(err) != codes.NotFound {
			t.Errorf("err = %v, want NotFound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Allocate still waiting after the fake clock passed --allocate-wait")
	}
}

// A pod deleted before the kubelet admitted it is on neither the API server
// nor the cache, yet the kubelet may still work through its queue and ask
// for it: Allocate and GetPreferredAllocation answer at once (NotFound; no
// preference) instead of holding the kubelet's admissions, every pod of the
// node behind this one, for --allocate-wait. The fake clock never moves: a
// wait would never end.
func TestNoWaitForAPodTheAPIServerDoesNotHave(t *testing.T) {
	store, c := twoCards(t)
	clk := testingclock.NewFakeClock(time.Now())
	p := New(Config{PluginDir: t.TempDir(), AllocateWait: 10 * time.Second, Clock: clk}, store, &memCluster{}, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	done := make(chan error, 2)
	go func() { done <- allocateIDs(context.Background(), p, unitIDs(c[0].UUID, 0, 2)) }()
	go func() {
		_, err := p.units.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: unitIDs(c[0].UUID, 0, 8), AllocationSize: 2}}})
		done <- err
	}()
	for i := range 2 {
		select {
		case err := <-done:
			if i == 0 && err != nil && status.Code(err) != codes.NotFound {
				t.Errorf("err = %v, want NotFound (Allocate) or none (GetPreferredAllocation)", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("still waiting for a pod the API server does not have (the fake clock never moves)")
		}
	}
}

// Malformed device IDs are the caller's mistake: InvalidArgument, with a
// message that says what a valid ID looks like — in Allocate,
// GetPreferredAllocation and PreStartContainer alike.
func TestMalformedDeviceIDsAreInvalidArgument(t *testing.T) {
	store, c := twoCards(t)
	p := New(Config{PluginDir: t.TempDir()}, store, &memCluster{}, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	ctx := context.Background()
	good := unitIDs(c[0].UUID, 0, 1)[0]
	for _, ids := range [][]string{{"3"}, {c[0].UUID}, {c[0].UUID + "::x"}, {c[0].UUID + "::-1"}, {good, "GPU-x::"}, {}} {
		calls := map[string]error{
			"Allocate": allocateIDs(ctx, p, ids),
		}
		if len(ids) > 0 {
			_, calls["GetPreferredAllocation"] = p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: ids, AllocationSize: 1}}})
			_, calls["GetPreferredAllocation (must include)"] = p.units.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{good}, MustIncludeDeviceIDs: ids, AllocationSize: 1}}})
			_, calls["PreStartContainer"] = p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids})
		}
		for call, err := range calls {
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s(%q) = %v, want InvalidArgument", call, ids, err)
				continue
			}
			if msg := status.Convert(err).Message(); len(ids) > 0 && !(strings.Contains(msg, "<card UUID>::<unit number>") && strings.Contains(msg, "::7")) {
				t.Errorf("%s(%q): message %q does not say what a valid ID looks like", call, ids, msg)
			}
		}
	}
}

// GetPreferredAllocation waits for the pod on the plugin's clock, like
// Allocate; when none comes within --allocate-wait it still answers (best
// fit) rather than failing the kubelet's call.
func TestGetPreferredAllocationWaitsOnTheInjectedClock(t *testing.T) {
	store, c := twoCards(t)
	clk := testingclock.NewFakeClock(time.Now())
	p := New(Config{PluginDir: t.TempDir(), AllocateWait: 2 * time.Second, Clock: clk}, store, &memCluster{behind: true}, nil, ktesting.NewLogger(t, ktesting.NewConfig()))
	type answer struct {
		resp *pluginapi.PreferredAllocationResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := p.units.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: unitIDs(c[0].UUID, 0, 4), AllocationSize: 2}}})
		done <- answer{resp, err}
	}()
	for waited := time.Duration(0); waited < 2*time.Second; waited += allocatePoll {
		waitFor(t, "GetPreferredAllocation to wait on the clock", clk.HasWaiters)
		select {
		case a := <-done:
			t.Fatalf("GetPreferredAllocation returned after %v of a 2 s wait: %v", waited, a.err)
		default:
		}
		clk.Step(allocatePoll)
	}
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("err = %v, want a best-fit answer", a.err)
		}
		if diff := cmp.Diff(unitIDs(c[0].UUID, 0, 2), a.resp.ContainerResponses[0].DeviceIDs); diff != "" {
			t.Errorf("preferred (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GetPreferredAllocation still waiting after the fake clock passed --allocate-wait")
	}
}
