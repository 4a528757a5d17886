package chaos

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/api"
)

// handOverKubelet is a kubelet whose device manager gives pod "old"'s units
// to pod "new" at the moment the extender is read (handedOver).
type handOverKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	handedOver *atomic.Bool
}

func (k handOverKubelet) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	return &podresourcesv1.AllocatableResourcesResponse{}, nil
}

func (k handOverKubelet) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	holder := "old"
	if k.handedOver.Load() {
		holder = "new"
	}
	resp := &podresourcesv1.GetPodResourcesResponse{PodResources: &podresourcesv1.PodResources{Name: req.PodName, Namespace: req.PodNamespace}}
	if req.PodName == holder {
		resp.PodResources.Containers = []*podresourcesv1.ContainerResources{{Name: "c0", Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: string(api.DefaultNames().ResourceName()), DeviceIds: ids(cardA, 0, 16)}}}}
	}
	return resp, nil
}

// A deleting pod whose units the kubelet hands to the next pod between the
// observer's looks: the extender, read at the hand-over, counts both on one
// card (32 of 24 units, both Allocated), and the kubelet, read after it, no
// longer holds the old one, so it is released and no capacity is violated.
// Read in the other order, the kubelet still held the old pod when it was
// asked, and the checks reported "extender: card over capacity".
func TestTheKubeletIsReadAfterTheExtenderItExcuses(t *testing.T) {
	old := newPod("old", 16).assigned(t, cardA).running(t, cardA, 0)
	now := metav1.Now()
	old.DeletionTimestamp = &now
	next := newPod("new", 16).assigned(t, cardA).running(t, cardA, 0)
	client := fake.NewClientset(testNode(t), old.Pod, next.Pod)

	var handedOver atomic.Bool
	dir, err := os.MkdirTemp("", "chaos") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, handOverKubelet{handedOver: &handedOver})
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)

	extender := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		handedOver.Store(true)
		_ = json.NewEncoder(w).Encode([]api.ExtenderNode{{Name: "n", Cards: []api.ExtenderCard{{UUID: cardA, Capacity: 24, Used: 32, Pods: []api.ExtenderPod{
			{Namespace: "ns", Name: "old", Container: "c0", Units: 16, Phase: api.PhaseAllocated},
			{Namespace: "ns", Name: "new", Container: "c0", Units: 16, Phase: api.PhaseAllocated}}}}}})
	}))
	t.Cleanup(extender.Close)

	o := &Observer{Client: client, Namespace: "ns", Nodes: []string{"n"}, PodResourcesSocket: func(string) string { return socket }, ExtenderURL: extender.URL}
	obs, err := o.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if obs.ExtenderErr != nil || obs.KubeletErr["n"] != nil {
		t.Fatalf("extender: %v, kubelet: %v", obs.ExtenderErr, obs.KubeletErr["n"])
	}
	if _, holds := obs.Kubelet["n"].Containers["ns/old"]; holds {
		t.Errorf("the kubelet was read before the extender: it still holds ns/old")
	}
	if vs := CheckExtenderCapacity(obs, false); len(vs) != 0 {
		t.Errorf("got %v; want none", vs)
	}
}
