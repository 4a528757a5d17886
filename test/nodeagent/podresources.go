package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

// PodResourcesSocket is where the kubelet serves its PodResources API.
const PodResourcesSocket = KubeletDir + "/pod-resources/kubelet.sock"

// servePodResources serves the kubelet's PodResources API (v1, the
// kubelet's own server code) at socket from the agent's device manager and
// pod cache, until ctx ends.
func (a *Agent) servePodResources(ctx context.Context, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("pod resources dir: %w", err)
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale %s: %w", socket, err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods:    podsProvider{a},
		Devices: devicesProvider{a.dm},
		Cpus:    noCPUs{},
		Memory:  noMemory{},
		// The kubelet's server calls it for every container (DRA feature
		// gate on by default): it must not be nil.
		DynamicResources: noDynamicResources{},
	}))
	go func() {
		<-ctx.Done()
		s.Stop()
	}()
	go func() { _ = s.Serve(l) }()
	return nil
}

type podsProvider struct{ a *Agent }

func (p podsProvider) GetActivePods() []*corev1.Pod { return p.a.activePods() }

func (p podsProvider) GetPods() []*corev1.Pod {
	all, _ := p.a.pods.List(labels.Everything())
	var out []*corev1.Pod
	for _, pod := range all {
		if pod.Spec.NodeName == p.a.cfg.NodeName {
			out = append(out, pod)
		}
	}
	return out
}

func (p podsProvider) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	pod, err := p.a.pods.Pods(namespace).Get(name)
	if err != nil || pod.Spec.NodeName != p.a.cfg.NodeName || !p.a.knows(pod) {
		return nil, false
	}
	return pod, true
}

type devicesProvider struct{ dm DeviceManager }

func (d devicesProvider) UpdateAllocatedDevices(klog.Logger) { d.dm.UpdateAllocatedDevices() }

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.dm.GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices(klog.Logger) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.dm.GetAllocatableDevices())
}

// containerDevices converts as the kubelet's container manager does: one
// entry per device (and NUMA node, when the plugin reports topology).
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for res, ids := range devs {
		for id, dev := range ids {
			topo := dev.GetTopology()
			if topo == nil {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
				continue
			}
			for _, n := range topo.GetNodes() {
				out = append(out, &podresourcesv1.ContainerDevices{
					ResourceName: res, DeviceIds: []string{id},
					Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: n.GetID()}}},
				})
			}
		}
	}
	return out
}

type noCPUs struct{}

func (noCPUs) GetCPUs(*corev1.Pod, *corev1.Container) []int64 { return nil }
func (noCPUs) GetPodCPUs(string) []int64                      { return nil }
func (noCPUs) GetAllocatableCPUs() []int64                    { return nil }

type noMemory struct{}

func (noMemory) GetMemory(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesv1.ContainerMemory {
	return nil
}
func (noMemory) GetPodMemory(klog.Logger, string) []*podresourcesv1.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory { return nil }

type noDynamicResources struct{}

func (noDynamicResources) GetDynamicResources(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
