package nodeagent

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
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
func startDeviceManager(activePods func() []*v1.Pod) (*devicemanager.ManagerImpl, error) {
	m, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		return nil, fmt.Errorf("create device manager: %w", err)
	}
	if err := m.Start(activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("start device manager: %w", err)
	}
	return m, nil
}
