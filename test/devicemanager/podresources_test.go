package devicemanager

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

const podResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// servePodResources serves the kubelet's own PodResources v1 server over the
// real device manager, as the kubelet does.
func (k *kubelet) servePodResources(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(podResourcesSocket), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(podResourcesSocket)
	l, err := net.Listen("unix", podResourcesSocket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods: podsProvider{k}, Devices: devicesProvider{k.m}, Cpus: none{}, Memory: none{}, DynamicResources: none{},
	}))
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); cancel() })
}

type podsProvider struct{ k *kubelet }

func (p podsProvider) GetActivePods() []*corev1.Pod { return p.k.activePods() }
func (p podsProvider) GetPods() []*corev1.Pod       { return p.k.activePods() }
func (p podsProvider) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	for _, pod := range p.k.activePods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

type devicesProvider struct{ m *devicemanager.ManagerImpl }

func (d devicesProvider) UpdateAllocatedDevices(l klog.Logger) { d.m.UpdateAllocatedDevices(l) }
func (d devicesProvider) GetDevices(podUID, container string) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetDevices(podUID, container))
}
func (d devicesProvider) GetAllocatableDevices(l klog.Logger) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetAllocatableDevices(l))
}

// containerDevices converts as the kubelet's container manager does: one entry per device.
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for res, ids := range devs {
		for id := range ids {
			out = append(out, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
		}
	}
	return out
}

type none struct{}

func (none) GetCPUs(*corev1.Pod, *corev1.Container) []int64 { return nil }
func (none) GetPodCPUs(string) []int64                      { return nil }
func (none) GetAllocatableCPUs() []int64                    { return nil }
func (none) GetMemory(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesv1.ContainerMemory {
	return nil
}
func (none) GetPodMemory(klog.Logger, string) []*podresourcesv1.ContainerMemory { return nil }
func (none) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory { return nil }
func (none) GetDynamicResources(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesv1.DynamicResource {
	return nil
}

// The kubelet admits two pending pods of the same size in the other order
// than the plugin's queue (the younger first). Each container still gets a
// card with room (6 of 8 units: they cannot share one), and once the plugin
// reads the kubelet's PodResources every record names the card its
// container's runtime options actually expose.
func TestRecordsFollowTheKubeletWhenSameSizePodsAreAdmittedOutOfOrder(t *testing.T) {
	if reason := os.Getenv(envSkip); reason != "" {
		t.Skip(reason)
	}
	freshKubeletDir(t)
	src, err := nvml.ParseSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	sim := nvml.NewSimulator(node, src.GPUs...)
	c0, c1 := card{sim.UUID(0), 0}, card{sim.UUID(1), 1}
	older := pod("older", 10, []int64{6}, []card{c0})
	younger := pod("younger", 11, []int64{6}, []card{c1})
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, older, younger)

	k := startKubelet(t, nil)
	defer func() { _ = k.m.Stop(klog.Background()) }()
	k.servePodResources(t)
	stop := startPlugin(t, client, "--pod-resources-socket="+podResourcesSocket, "--reconcile-interval=100ms", "--allocate-wait=5s")
	defer stop()
	k.waitCapacity(t, 16)

	if err := k.admit(younger); err != nil {
		t.Fatalf("admit younger: %v", err)
	}
	if err := k.admit(older); err != nil {
		t.Fatalf("admit older: %v", err)
	}
	got := map[string]string{"older": k.mountedCard(t, older, "c0"), "younger": k.mountedCard(t, younger, "c0")}
	if got["older"] == got["younger"] {
		t.Fatalf("both containers got card %s: overbooked", got["older"])
	}
	for name, card := range got {
		var rec string
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			a, err := api.DefaultNames().AssignmentFromPod(p)
			if err != nil {
				return false, err
			}
			rec = a.Containers[0].CardUUID
			return rec == card, nil // Allocated only where corrected: with the kubelet's account a right record is not written
		})
		if err != nil {
			t.Errorf("pod %s: record names card %s, its container has %s", name, rec, card)
		}
	}
}
