package plugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Holding is one container's devices of one resource, as the kubelet's
// PodResources API reports them.
type Holding struct {
	Namespace, Pod, Container string
	IDs                       []string
}

// PodResources is the kubelet's record of which container holds which
// devices.
type PodResources interface {
	List(ctx context.Context) ([]Holding, error)
}

// KubeletPodResources reads the kubelet PodResources API
// (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix socket, keeping the
// devices of one resource.
type KubeletPodResources struct {
	Socket   string
	Resource string
}

// List implements PodResources.
func (k KubeletPodResources) List(ctx context.Context) ([]Holding, error) {
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", k.Socket, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources List on %s: %w", k.Socket, err)
	}
	var out []Holding
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == k.Resource {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) > 0 {
				out = append(out, Holding{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName(), IDs: ids})
			}
		}
	}
	return out, nil
}
