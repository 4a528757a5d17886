package nodeagent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/api"
)

func TestPodResourcesAPIListsTheDeviceManagersDevicesPerContainer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	client := fake.NewClientset(gpuPod("p", time.Now(), "main"))
	agent, err := New(Config{
		NodeName: testNode, Client: client, SyncInterval: 50 * time.Millisecond, PodResourcesSocket: socket,
		StartDeviceManager: func(func() []*corev1.Pod) (DeviceManager, error) { return &fakeDM{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitPod(t, client, "p", running)

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var resp *podresourcesv1.ListPodResourcesResponse
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err = podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(resp.PodResources) != 1 || resp.PodResources[0].Name != "p" || len(resp.PodResources[0].Containers) != 1 {
		t.Fatalf("List = %v, want pod p with one container", resp)
	}
	devs := resp.PodResources[0].Containers[0].Devices
	if len(devs) != 1 || devs[0].ResourceName != string(api.DefaultNames().ResourceName()) || len(devs[0].DeviceIds) != 1 || devs[0].DeviceIds[0] != "GPU-a::main" {
		t.Errorf("container devices = %v, want GPU-a::main of %s", devs, api.DefaultNames().ResourceName())
	}
}
