package plugin

import (
	"context"
	"fmt"
	"slices"
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

// A pod is deleted and created again under the same name while the kubelet
// admits the first: by the time the kubelet asks about the first, the
// plugin's cache shows only the second (bound already), and the kubelet's
// account (PodResources, which names pods, never UIDs) names the pod it
// admits "gpu": the plugin takes the first's allocation for the second's.
// When the kubelet then removes the first and admits the second, the plugin
// must ask the kubelet again rather than trust what it remembered, and admit
// the second, not refuse it for want of a pending container (seen on the
// install lane: "no pending container on this node requests this many
// units").
//
// The kubelet asks GetPreferredAllocation, then Allocate; a plugin that took over between the two
// (a standby, a restart) gets the Allocate alone.
func TestAPodRecreatedUnderItsNameWhileTheKubeletAdmitsIsAdmitted(t *testing.T) {
	for _, preference := range []bool{true, false} {
		t.Run(fmt.Sprintf("GetPreferredAllocation=%v", preference), func(t *testing.T) {
			ctx := context.Background()
			sn := simtest.New(t, nodeName, "spec:2x40GiB:Test-GPU")
			first := podtest.Bound(nodeName, "gpu", 1).GPU("main", 4).Obj()
			second := podtest.Bound(nodeName, "gpu", 2).UID("uid-gpu-again").GPU("main", 4).Assign(api.PhaseAssigned, sn.Cards[1]).Obj()
			// The API server (and the plugin's cache): the first deleted, the second bound.
			p, srv, k := kubeletAndPlugin(t, sn, second)

			// The kubelet admits the first.
			srv.Know(first.Namespace, first.Name)
			ids, err := k.allocate(ctx, p, first, first.Spec.Containers[0])
			if err != nil {
				t.Fatalf("admission of the first pod: %v", err)
			}
			srv.Hold(first.Namespace, first.Name, "main", ids...)
			// Then it removes the first (its units free again) and admits the second.
			srv.Forget(first.Namespace, first.Name)
			for _, id := range ids {
				k.free[id] = true
			}
			srv.Know(second.Namespace, second.Name)
			var again []string
			if preference {
				again, err = k.allocate(ctx, p, second, second.Spec.Containers[0])
			} else { // the device manager's pick: free units of the planned card other than the first's
				for _, id := range k.available() {
					if card, _ := cardOfIDs([]string{id}); len(again) < 4 && card == sn.Cards[1].UUID && !slices.Contains(ids, id) {
						again = append(again, id)
					}
				}
				_, err = p.units.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: again}}})
			}
			if err != nil {
				t.Fatalf("the kubelet fails the second pod: %v", err)
			}
			if h, ok := p.state.units.byDeviceIDs(again); !ok || h.UID != second.UID {
				t.Errorf("the units are held by %+v (found %v); want the second pod %s", h, ok, second.UID)
			}
		})
	}
}

// The re-read before a refusal drops only what the kubelet, asked again, shows holding nothing: a
// pod the kubelet admitted whose status does not say so yet keeps its units when the kubelet
// admits a pod the plugin cannot see (deleted before its admission), and when the kubelet cannot
// be asked again.
func TestARefusalKeepsTheHoldingsOfPodsAdmittedButNotRunningYet(t *testing.T) {
	for _, readable := range []bool{true, false} {
		t.Run(fmt.Sprintf("kubelet readable=%v", readable), func(t *testing.T) {
			ctx := context.Background()
			sn := simtest.New(t, nodeName, "spec:1x40GiB:Test-GPU")
			admitted := podtest.Bound(nodeName, "admitted", 1).GPU("main", 4).Assign(api.PhaseAssigned, sn.Cards[0]).Obj()
			gone := podtest.Bound(nodeName, "gone", 2).GPU("main", 4).Obj() // deleted: not in the cache
			p, srv, k := kubeletAndPlugin(t, sn, admitted)
			srv.Know(admitted.Namespace, admitted.Name)
			ids, err := k.allocate(ctx, p, admitted, admitted.Spec.Containers[0])
			if err != nil {
				t.Fatalf("admission of %s: %v", admitted.Name, err)
			}
			srv.Hold(admitted.Namespace, admitted.Name, "main", ids...) // its status still Pending
			srv.Know(gone.Namespace, gone.Name)
			if !readable {
				srv.DisableGet()
			}
			if _, err := k.allocate(ctx, p, gone, gone.Spec.Containers[0]); err == nil {
				t.Fatalf("the plugin allocated for a pod it cannot see")
			}
			if h, ok := p.state.units.byDeviceIDs(ids); !ok || h.UID != admitted.UID {
				t.Errorf("after the refusal the admitted pod's units are held by %+v (found %v); want %s", h, ok, admitted.UID)
			}
		})
	}
}

// kubeletAndPlugin is a plugin of node sn whose pod cache (and API server) holds pods, reading the
// account of the kubelet model's PodResources server.
func kubeletAndPlugin(t *testing.T, sn simtest.Node, pods ...*corev1.Pod) (*Plugin, *podrestest.Server, *kubeletModel) {
	res := string(api.DefaultNames().ResourceName())
	mem := &memCluster{arrival: map[types.UID]uint64{}, pods: pods}
	for i, pod := range pods {
		mem.arrival[pod.UID] = uint64(i + 1)
	}
	srv := podrestest.Start(t, res)
	podres := podresources.NewKubelet(srv.Socket, res, mem.Arrival, nil)
	p := New(Config{PluginDir: t.TempDir(), AllocateWait: 10 * time.Second}, sn.Store, mem, podres, ktesting.NewLogger(t, ktesting.NewConfig()))
	return p, srv, newKubeletModel(sn.Store, &fakePodResources{})
}
