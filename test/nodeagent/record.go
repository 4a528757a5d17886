package nodeagent

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	"github.com/gpushare/gpushare/api"
)

// RecordVersion is the version of ContainerRecords this package writes.
const RecordVersion = 1

// ContainerRecords is what the agent writes on an admitted pod in
// api.Names.AnnotationSimulatedContainers: per container, what the real kubelet
// device manager handed to it. A container runtime would turn exactly this
// into the container's environment and bind mounts.
type ContainerRecords struct {
	Version    int               `json:"version"`
	Node       string            `json:"node"`
	Containers []ContainerRecord `json:"containers"`
}

// ContainerRecord is one container's devices and run options.
type ContainerRecord struct {
	Name string `json:"name"`
	// DeviceIDs are the device IDs the device manager allocated, per resource
	// name, sorted.
	DeviceIDs map[string][]string `json:"deviceIDs,omitempty"`
	// Env is the environment the device plugin asked for.
	Env map[string]string `json:"env,omitempty"`
	// Mounts are the bind mounts the device plugin asked for, sorted by
	// container path.
	Mounts []Mount `json:"mounts,omitempty"`
	// Devices are the device nodes the device plugin asked for.
	Devices []Device `json:"devices,omitempty"`
}

// Mount is a bind mount from the host into the container.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// Device is a device node from the host in the container.
type Device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

// Container returns the record of the named container.
func (r ContainerRecords) Container(name string) (ContainerRecord, bool) {
	for _, c := range r.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return ContainerRecord{}, false
}

// Encode returns the annotation value.
func (r ContainerRecords) Encode() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode container records: %w", err)
	}
	return string(b), nil
}

// RecordsFromPod decodes the pod's api.Names.AnnotationSimulatedContainers.
func RecordsFromPod(pod *corev1.Pod) (ContainerRecords, error) {
	v, ok := pod.Annotations[api.DefaultNames().AnnotationSimulatedContainers()]
	if !ok {
		return ContainerRecords{}, fmt.Errorf("pod %s/%s has no %s annotation (not admitted by a node agent yet?)", pod.Namespace, pod.Name, api.DefaultNames().AnnotationSimulatedContainers())
	}
	var r ContainerRecords
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return ContainerRecords{}, fmt.Errorf("decode %s on pod %s/%s: %w", api.DefaultNames().AnnotationSimulatedContainers(), pod.Namespace, pod.Name, err)
	}
	if r.Version != RecordVersion {
		return ContainerRecords{}, fmt.Errorf("%s on pod %s/%s has version %d, want %d", api.DefaultNames().AnnotationSimulatedContainers(), pod.Namespace, pod.Name, r.Version, RecordVersion)
	}
	return r, nil
}

// newContainerRecord converts what the device manager returned for a container.
func newContainerRecord(name string, devs devicemanager.ResourceDeviceInstances, opts *devicemanager.DeviceRunContainerOptions) ContainerRecord {
	rec := ContainerRecord{Name: name}
	for res, ids := range devs {
		if len(ids) == 0 {
			continue
		}
		if rec.DeviceIDs == nil {
			rec.DeviceIDs = map[string][]string{}
		}
		list := make([]string, 0, len(ids))
		for id := range ids {
			list = append(list, id)
		}
		sort.Strings(list)
		rec.DeviceIDs[res] = list
	}
	if opts == nil {
		return rec
	}
	for _, e := range opts.Envs {
		if rec.Env == nil {
			rec.Env = map[string]string{}
		}
		rec.Env[e.Name] = e.Value
	}
	for _, m := range opts.Mounts {
		rec.Mounts = append(rec.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	sort.Slice(rec.Mounts, func(i, j int) bool { return rec.Mounts[i].ContainerPath < rec.Mounts[j].ContainerPath })
	for _, d := range opts.Devices {
		rec.Devices = append(rec.Devices, Device{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	return rec
}
