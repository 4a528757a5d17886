package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/api"
)

// Holding is one container's devices of one resource, as the kubelet's
// PodResources API reports them.
//
// A pod the kubelet knows (its pod manager has it) whose containers hold
// none of the resource is reported as one Holding with no Container and no
// IDs (Known): the kubelet adds a pod to its pod manager just before it
// admits it (HandlePodAdditions: podManager.AddPod, then the admission that
// calls the device plugin), so a pending pod the kubelet knows is the pod
// being admitted now. A pod it does not know yet is not reported at all.
type Holding struct {
	Namespace, Pod, Container string
	IDs                       []string
}

// Known reports whether h only says that the kubelet knows the pod (see
// Holding): no container, no devices.
func (h Holding) Known() bool { return h.Container == "" }

// PodResources is the kubelet's record of which container holds which
// devices, read pod by pod.
type PodResources interface {
	// Get returns the devices the kubelet gave the containers of pods, and
	// a Known Holding for each pod it knows that holds none. A pod the
	// kubelet does not know (yet, or any more) holds nothing and is not
	// reported.
	Get(ctx context.Context, pods []*corev1.Pod) ([]Holding, error)
}

// ErrGetDisabled: the kubelet does not serve PodResources Get.
var ErrGetDisabled = errors.New("the kubelet's PodResources API does not serve Get: enable the kubelet's KubeletPodResourcesGet feature gate (beta, on by default since Kubernetes 1.34); until then the plugin decides on its own memory, and it never falls back to List, which drops the kubelet's reservation of an allocation in flight (kubernetes/kubernetes#137534)")

// KubeletPodResources reads the kubelet PodResources API
// (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix socket, keeping the
// devices of one resource.
//
// It calls Get, one pod at a time, and never List: in kubelet v1.34 List
// first calls the device manager's UpdateAllocatedDevices, which rebuilds
// the set of allocated devices from the committed allocations and so drops
// the reservation of an Allocate in flight; the next admission can then be
// handed the same devices (kubernetes/kubernetes#137534). The plugin reads
// the account inside GetPreferredAllocation, Allocate and PreStartContainer,
// exactly that window, and its reconciler and usage sampler may run during
// any admission. Get reads the pod's allocations and changes nothing.
type KubeletPodResources struct {
	Socket   string
	Resource string
}

// Get implements PodResources. Pods that ask for none of the resource are
// not asked about: the kubelet gave them none.
func (k KubeletPodResources) Get(ctx context.Context, pods []*corev1.Pod) ([]Holding, error) {
	var asking []*corev1.Pod
	for _, p := range pods {
		if asksFor(p, corev1.ResourceName(k.Resource)) {
			asking = append(asking, p)
		}
	}
	if len(asking) == 0 {
		return nil, nil
	}
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", k.Socket, err)
	}
	defer func() { _ = conn.Close() }()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var out []Holding
	for _, p := range asking {
		resp, err := getPaced(ctx, client, &podresourcesv1.GetPodResourcesRequest{PodName: p.Name, PodNamespace: p.Namespace})
		if err != nil {
			switch st := status.Convert(err); {
			case st.Code() == codes.Unimplemented,
				// The kubelet answers a disabled Get with a plain error
				// (pkg/kubelet/apis/podresources/server_v1.go): its
				// message is all there is to tell.
				st.Code() == codes.Unknown && strings.Contains(st.Message(), "Get method disabled"):
				return nil, fmt.Errorf("pod resources Get on %s: %w (%s)", k.Socket, ErrGetDisabled, st.Message())
			case st.Code() == codes.Unknown && strings.Contains(st.Message(), "not found"):
				continue // not known to the kubelet: it holds nothing
			}
			return nil, fmt.Errorf("pod resources Get of %s/%s on %s: %w", p.Namespace, p.Name, k.Socket, err)
		}
		pr := resp.GetPodResources()
		before := len(out)
		for _, c := range pr.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == k.Resource {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) > 0 {
				out = append(out, Holding{Namespace: pr.GetNamespace(), Pod: pr.GetName(), Container: c.GetName(), IDs: ids})
			}
		}
		if len(out) == before {
			out = append(out, Holding{Namespace: p.Namespace, Pod: p.Name})
		}
	}
	return out, nil
}

// asksFor reports whether a container of the pod (init containers too)
// names the resource in its limits or requests (api.KubeletDemand).
func asksFor(p *corev1.Pod, res corev1.ResourceName) bool {
	return len(api.KubeletDemand(p, res)) > 0
}

// The kubelet's PodResources server refuses calls beyond its rate limit
// (100 per second, bursts of 10) with ResourceExhausted, for all its
// clients together. The plugin reads it per pod from its reconciler, its
// Allocate path and its memory sampler, so every Get of the process waits
// on one budget below the kubelet's, and a refused Get is asked again.
var podResourcesBudget = rate.NewLimiter(podResourcesQPS, podResourcesBurst)

const (
	podResourcesQPS   = 50
	podResourcesBurst = 5
	// podResourcesRetries is how often a Get refused by the kubelet's rate
	// limit is asked again (each after the budget's next token).
	podResourcesRetries = 5
)

func getPaced(ctx context.Context, client podresourcesv1.PodResourcesListerClient, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	for try := 0; ; try++ {
		if err := podResourcesBudget.Wait(ctx); err != nil {
			return nil, err
		}
		resp, err := client.Get(ctx, req)
		if status.Code(err) != codes.ResourceExhausted || try == podResourcesRetries {
			return resp, err
		}
	}
}
