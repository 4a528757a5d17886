package nodeagent

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// sourcesReady tells the device manager that the agent's pod source (the API
// server) is in sync, so it may garbage-collect devices of pods that are gone.
type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

// startDeviceManager starts the real kubelet device manager. It serves the
// registration socket /var/lib/kubelet/device-plugins/kubelet.sock and wipes
// that folder first: call it only inside a private mount namespace.
// activePods is how the manager learns which pods still hold devices.
func startDeviceManager(activePods func() []*v1.Pod) (DeviceManager, error) {
	logger := klog.Background().WithName("devicemanager")
	m, err := devicemanager.NewManagerImpl(logger, nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		return nil, fmt.Errorf("create device manager: %w", err)
	}
	if err := m.Start(logger, activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("start device manager: %w", err)
	}
	return kubeletDeviceManager{m: m, logger: logger}, nil
}

// kubeletDeviceManager is the kubelet's device manager behind the agent's
// DeviceManager, with the logger and context the kubelet passes it. A
// container is allocated as the kubelet admits a new pod (AddOperation).
type kubeletDeviceManager struct {
	m      *devicemanager.ManagerImpl
	logger klog.Logger
}

func (k kubeletDeviceManager) ctx() context.Context {
	return klog.NewContext(context.Background(), k.logger)
}

func (k kubeletDeviceManager) Allocate(pod *v1.Pod, c *v1.Container) error {
	return k.m.Allocate(k.ctx(), pod, c, lifecycle.AddOperation)
}

func (k kubeletDeviceManager) GetDeviceRunContainerOptions(pod *v1.Pod, c *v1.Container) (*devicemanager.DeviceRunContainerOptions, error) {
	return k.m.GetDeviceRunContainerOptions(k.ctx(), pod, c)
}

func (k kubeletDeviceManager) GetDevices(podUID, containerName string) devicemanager.ResourceDeviceInstances {
	return k.m.GetDevices(podUID, containerName)
}

func (k kubeletDeviceManager) GetAllocatableDevices() devicemanager.ResourceDeviceInstances {
	return k.m.GetAllocatableDevices(k.logger)
}

func (k kubeletDeviceManager) GetCapacity() (v1.ResourceList, v1.ResourceList, []string) {
	return k.m.GetCapacity(k.logger)
}

func (k kubeletDeviceManager) UpdateAllocatedDevices() { k.m.UpdateAllocatedDevices(k.logger) }

func (k kubeletDeviceManager) Stop() error { return k.m.Stop(k.logger) }
