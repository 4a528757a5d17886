package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/internal/podrestest"
	"github.com/gpushare/gpushare/deviceplugin/internal/simtest"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// BenchmarkAdmission is the plugin's share of one GPU pod's admission on a busy node, as the
// kubelet makes it one pod at a time: GetPreferredAllocation, Allocate (the kubelet's account
// read through its PodResources server) and PreStartContainer, for a pod with a signed record
// among `pods` pods bound to the node (records signed, as the chart runs it). The API server is
// an in-memory cache: this is the plugin's CPU, not the network. Per op: one pod admitted.
func BenchmarkAdmission(b *testing.B) {
	for _, pods := range []int{30, 100} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchAdmission(b, pods) })
	}
}

func benchAdmission(b *testing.B, pods int) {
	ctx := context.Background()
	keys := podtest.RecordKeys(strings.Repeat("k", 32))
	sn := simtest.New(b, nodeName, "spec:8x80GiB:Test-GPU")
	res := string(api.DefaultNames().ResourceName())
	for n := 0; n < b.N; n += pods {
		b.StopTimer()
		srv := podrestest.Start(b, res)
		mem := &memCluster{arrival: map[types.UID]uint64{}}
		for i := range pods {
			name := fmt.Sprintf("p%03d-%d", i, n)
			mem.arrival[types.UID("uid-"+name)] = uint64(i)
			mem.pods = append(mem.pods, podtest.Bound(nodeName, name, 1).GPU("main", 2).Assign(api.PhaseAssigned, sn.Cards[i%8]).Sign(keys).Obj())
		}
		podres := podresources.NewKubelet(srv.Socket, res, mem.Arrival, nil)
		p := New(Config{PluginDir: b.TempDir(), RecordKeys: podtest.NodeKeys(keys, nodeName, "node")}, sn.Store, mem, podres, logr.Discard())
		k := newKubeletModel(sn.Store, &fakePodResources{})
		b.StartTimer()
		for i := 0; i < pods && n+i < b.N; i++ {
			pod := mem.pods[i]
			srv.Know(pod.Namespace, pod.Name)
			ids, err := k.allocate(ctx, p, pod, pod.Spec.Containers[0])
			if err != nil {
				b.Fatalf("admission of %s: %v", pod.Name, err)
			}
			srv.Hold(pod.Namespace, pod.Name, "main", ids...)
			if _, err := p.units.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
				b.Fatal(err)
			}
			mem.mu.Lock()
			mem.pods[i] = mem.pods[i].DeepCopy()
			mem.pods[i].Status.Phase = corev1.PodRunning
			mem.mu.Unlock()
		}
	}
}
