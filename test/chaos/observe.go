package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/api"
)

// Observation is one look at the run: the API objects, the extender's view
// and each node's kubelet account, taken one after the other in that order (each source is
// a consistent snapshot of itself; the checks only compare sources where a
// value cannot change between the looks).
type Observation struct {
	At time.Time
	// Pods are the run namespace's pods (one List: one resourceVersion).
	Pods []corev1.Pod
	// Nodes are the run's nodes by name.
	Nodes map[string]*corev1.Node
	// Kubelet is each node agent's PodResources account; a node whose agent
	// did not answer (killed, restarting) is in KubeletErr instead.
	Kubelet    map[string]KubeletAccount
	KubeletErr map[string]error
	// Extender is the extender's /inspect for the run's nodes; ExtenderErr
	// when it did not answer (killed, restarting).
	Extender    map[string]api.ExtenderNode
	ExtenderErr error
	// Deleted are the pods ("namespace/name") the run deleted before this
	// observation (set by the Runner; see Released).
	Deleted map[string]bool
}

// KubeletAccount is what the kubelet's PodResources API says on one node.
type KubeletAccount struct {
	// Containers: "namespace/pod" → container → gpu-mem device IDs, for the
	// run's pods bound to the node that hold units.
	Containers map[string]map[string][]string
	// Allocatable are the gpu-mem device IDs the device manager offers
	// (healthy ones).
	Allocatable []string
}

// Observer gathers Observations.
type Observer struct {
	Client    kubernetes.Interface
	Namespace string
	Nodes     []string
	// PodResourcesSocket is the path of a node agent's PodResources socket.
	PodResourcesSocket func(node string) string
	// ExtenderURL is the extender's base URL (http://127.0.0.1:port).
	ExtenderURL string
}

// Observe looks once. Errors of the API server are returned; an agent or the
// extender that does not answer is recorded in the Observation.
func (o *Observer) Observe(ctx context.Context) (*Observation, error) {
	obs := &Observation{At: time.Now(), Nodes: map[string]*corev1.Node{}, Kubelet: map[string]KubeletAccount{}, KubeletErr: map[string]error{}}
	pods, err := o.Client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	obs.Pods = pods.Items
	// The extender before the kubelets: a deleting pod is released when the
	// kubelet no longer holds its units (Released), and that evidence must be
	// read after the view it excuses. Read before it, the kubelet can still
	// hold a pod that it hands over before the extender is read, and the
	// extender then rightly counts the old pod and its successor on one card.
	obs.Extender, obs.ExtenderErr = o.extender(ctx)
	for _, name := range o.Nodes {
		n, err := o.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get node %s: %w", name, err)
		}
		obs.Nodes[name] = n
		var onNode []string
		for i := range obs.Pods {
			if p := &obs.Pods[i]; p.Spec.NodeName == name && api.HoldsUnits(p) {
				onNode = append(onNode, p.Namespace+"/"+p.Name)
			}
		}
		acc, err := kubeletAccount(ctx, o.PodResourcesSocket(name), onNode)
		if err != nil {
			obs.KubeletErr[name] = err
			continue
		}
		obs.Kubelet[name] = acc
	}
	return obs, nil
}

// kubeletAccount asks the node's kubelet, with the PodResources API's Get,
// which devices each of the given pods' containers holds, and which devices
// it offers (GetAllocatableResources).
//
// Not List: in the kubelet (v1.34) List first calls the device manager's
// UpdateAllocatedDevices, which rebuilds the set of allocated devices from
// the committed allocations and so drops a reservation that an Allocate in
// flight made (kubernetes/kubernetes#137534). An observer that calls List
// while the kubelet admits pods makes the kubelet hand the same device to
// two pods; Get reads without that side effect.
func kubeletAccount(ctx context.Context, socket string, pods []string) (KubeletAccount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return KubeletAccount{}, err
	}
	defer conn.Close()
	c := podresourcesv1.NewPodResourcesListerClient(conn)
	alloc, err := c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return KubeletAccount{}, fmt.Errorf("PodResources GetAllocatableResources: %w", err)
	}
	acc := KubeletAccount{Containers: map[string]map[string][]string{}}
	for _, d := range alloc.GetDevices() {
		if d.GetResourceName() == string(api.DefaultNames().ResourceName()) {
			acc.Allocatable = append(acc.Allocatable, d.GetDeviceIds()...)
		}
	}
	for _, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		resp, err := c.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: ns, PodName: name})
		if err != nil {
			// Not (or no longer) in the kubelet's pod cache.
			continue
		}
		for _, ctr := range resp.GetPodResources().GetContainers() {
			for _, d := range ctr.GetDevices() {
				if d.GetResourceName() != string(api.DefaultNames().ResourceName()) {
					continue
				}
				if acc.Containers[key] == nil {
					acc.Containers[key] = map[string][]string{}
				}
				acc.Containers[key][ctr.GetName()] = append(acc.Containers[key][ctr.GetName()], d.GetDeviceIds()...)
			}
		}
	}
	return acc, nil
}

func (o *Observer) extender(ctx context.Context) (map[string]api.ExtenderNode, error) {
	if o.ExtenderURL == "" {
		return nil, fmt.Errorf("no extender URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.ExtenderURL+"/inspect", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /inspect: %s: %s", resp.Status, b)
	}
	var nodes []api.ExtenderNode
	if err := json.Unmarshal(b, &nodes); err != nil {
		return nil, fmt.Errorf("GET /inspect: %w", err)
	}
	out := map[string]api.ExtenderNode{}
	for _, n := range nodes {
		for _, want := range o.Nodes {
			if n.Name == want {
				out[n.Name] = n
			}
		}
	}
	return out, nil
}
