// Package podresources reads the kubelet's account of which container holds which devices (its
// PodResources API), paced below its rate limit; the device plugin and the memory sampler share it.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
)

// Holding is one container's devices of one resource, as the kubelet's PodResources API reports
// them.
//
// A pod the kubelet knows (its pod manager has it) whose containers hold none of the resource is
// reported as one Holding with no Container and no IDs (Known): the kubelet adds a pod to its pod
// manager just before it admits it (HandlePodAdditions: podManager.AddPod, then the admission that
// calls the device plugin), so a pending pod the kubelet knows is the pod being admitted now. A pod
// it does not know yet is not reported at all.
type Holding struct {
	Namespace, Pod, Container string
	IDs                       []string
}

// Known reports whether h only says that the kubelet knows the pod (see Holding): no container, no
// devices.
func (h Holding) Known() bool { return h.Container == "" }

// Reader is the kubelet's record of which container holds which devices, read pod by pod.
type Reader interface {
	// Get returns the devices the kubelet gave the containers of pods, and a Known Holding for each
	// pod it knows that holds none. A pod the kubelet does not know (yet, or any more) holds
	// nothing and is not reported.
	Get(ctx context.Context, pods []*corev1.Pod) ([]Holding, error)
}

// ErrGetDisabled: the kubelet does not serve PodResources Get.
var ErrGetDisabled = errors.New("the kubelet's PodResources API does not serve Get: enable the kubelet's KubeletPodResourcesGet feature gate (beta, on by default since Kubernetes 1.34); until then the plugin decides on its own memory, and it never falls back to List, which drops the kubelet's reservation of an allocation in flight (kubernetes/kubernetes#137534)")

// Kubelet reads the kubelet PodResources API on a unix socket, keeping the
// devices of one resource; one value per resource (NewKubelet), shared by the
// plugin and the usage sampler: it remembers what can no longer change.
//
// It calls Get, one pod at a time, never List: in kubelet v1.34 List calls
// the device manager's UpdateAllocatedDevices, which drops the reservation of
// an Allocate in flight, so the next admission can be handed the same devices
// (kubernetes/kubernetes#137534); the plugin reads inside its admission calls.
//
// A read asks about as few pods as the answer needs, so that an admission
// costs O(1) Gets (the kubelet serves all PodResources clients together at
// 100 calls a second):
//   - A pod whose every container that asks for the resource holds devices
//     is complete (the kubelet never re-allocates a container that holds
//     devices): remembered, not asked again while it is on the node.
//   - The others are asked in the kubelet's admission order
//     (allocate.SortAdmission), stopping at the first pod the kubelet knows
//     whose containers do not all hold devices yet: the kubelet admits one pod
//     at a time, so that is the pod it is admitting, and the ones after it are
//     not known to it yet. A read outside an admission stops after
//     unknownWindow pods the kubelet does not know (it receives pods in the
//     order its watch sees them bound).
type Kubelet struct {
	Socket   string
	Resource string
	// Arrival is the order the plugin's informer saw each pod bound (nil: unknown): ties in
	// creation time go by it, as the kubelet's do.
	Arrival func(types.UID) (uint64, bool)
	// Observe, if set, is told how many Gets each read made.
	Observe func(gets int)

	mu        sync.Mutex
	complete  map[types.UID][]Holding
	rechecked map[types.UID]bool // Recheck's
	// last is the last admission read and the pods it asked about; changes counts the Allocates
	// answered since (KubeletChanged).
	last        []Holding
	lastAsked   string // "": no admission read yet
	lastChanges uint64
	changes     uint64
	// admitting is the pod the last admission read found the kubelet admitting (see Allocated).
	admitting types.UID
}

// KubeletChanged says that an Allocate of this resource was answered: the kubelet records its
// devices now, so the next read asks again. Until then the kubelet's account does not change (it
// records a container's devices only after the Allocate it answers), and an admission read of the
// same pods — the Allocate after the GetPreferredAllocation of one container — reuses the last one.
func (k *Kubelet) KubeletChanged() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.changes++
}

// Allocated says that an Allocate of this resource gave container of pod the devices ids (after
// KubeletChanged for the same call). When the last admission read found the kubelet admitting that
// very pod, and ids are for the only container of it that asks for the resource, the kubelet
// records exactly that (it records the devices of the container it asked about as the Allocate
// returns, devicemanager's allocateContainerResources), and the pod is complete: it is remembered
// as if read, so that neither the next admission nor the container's PreStartContainer spends a Get
// on it. A pod the kubelet then fails to admit does not start: its remembered devices count for
// nothing (api.MayStartContainers), as a finished pod's do.
func (k *Kubelet) Allocated(pod *corev1.Pod, container string, ids []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	demand := api.KubeletDemand(pod, corev1.ResourceName(k.Resource))
	if pod.UID != k.admitting || len(demand) != 1 || demand[0].Name != container || int64(len(ids)) != demand[0].Units {
		return
	}
	if k.complete == nil {
		k.complete, k.rechecked = map[types.UID][]Holding{}, map[types.UID]bool{}
	}
	k.complete[pod.UID] = []Holding{{Namespace: pod.Namespace, Pod: pod.Name, Container: container, IDs: slices.Clone(ids)}}
	k.admitting = ""
}

// Recheck forgets, once a pod, what it remembers of pods not admitted yet (api.Admitted) and returns them: the
// kubelet names pods, not UIDs, so a pod recreated under its name while it admitted the first has the first's.
func (k *Kubelet) Recheck(pods []*corev1.Pod) (forgot []types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range pods {
		if _, ok := k.complete[p.UID]; ok && !api.Admitted(p) && !k.rechecked[p.UID] {
			delete(k.complete, p.UID)
			k.rechecked[p.UID], forgot, k.lastAsked = true, append(forgot, p.UID), ""
		}
	}
	return forgot
}

// unknownWindow is how many pods the kubelet does not know a read outside an admission asks about
// before it takes the rest in the kubelet's order as unknown too. A read for an admission
// (GetPreferredAllocation, Allocate: WithAdmission) reads on until it finds the pod the kubelet is
// admitting, wherever the kubelet's order put it, so a decision never depends on the order being
// guessed right: guessed right, that is the first pod asked.
const unknownWindow = 1

type admissionKey struct{}

// WithAdmission marks ctx as a call the kubelet makes while it admits a pod.
func WithAdmission(ctx context.Context) context.Context {
	return context.WithValue(ctx, admissionKey{}, true)
}

func admitting(ctx context.Context) bool { b, _ := ctx.Value(admissionKey{}).(bool); return b }

type startingKey struct{}

// WithStarting marks ctx as the PreStartContainer of the container that holds ids: a read outside
// an admission that already remembers a pod holding exactly ids answers from memory (see
// Allocated).
func WithStarting(ctx context.Context, ids []string) context.Context {
	return context.WithValue(ctx, startingKey{}, IDsKey(ids))
}

// IDsKey names a set of device IDs (in any order).
func IDsKey(ids []string) string {
	s := append([]string(nil), ids...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// remembered reports whether hs has a container holding exactly the IDs ctx's PreStartContainer is
// for (WithStarting).
func remembered(ctx context.Context, hs []Holding) bool {
	key, _ := ctx.Value(startingKey{}).(string)
	if key == "" {
		return false
	}
	return slices.ContainsFunc(hs, func(h Holding) bool { return len(h.IDs) > 0 && IDsKey(h.IDs) == key })
}

// NewKubelet reads resource's devices from the kubelet's PodResources socket.
func NewKubelet(socket, resource string, arrival func(types.UID) (uint64, bool), observe func(int)) *Kubelet {
	return &Kubelet{Socket: socket, Resource: resource, Arrival: arrival, Observe: observe}
}

// Get implements Reader. Pods that ask for none of the resource are not asked about: the kubelet
// gave them none.
func (k *Kubelet) Get(ctx context.Context, pods []*corev1.Pod) ([]Holding, error) {
	var out []Holding
	var ask []*corev1.Pod
	k.mu.Lock()
	if k.complete == nil {
		k.complete, k.rechecked = map[types.UID][]Holding{}, map[types.UID]bool{}
	}
	asking := map[types.UID]bool{}
	for _, p := range pods {
		if len(api.KubeletDemand(p, corev1.ResourceName(k.Resource))) == 0 { // no container (init ones too) asks for it
			continue
		}
		asking[p.UID] = true
		if hs, ok := k.complete[p.UID]; ok {
			out = append(out, hs...)
			continue
		}
		ask = append(ask, p)
	}
	for uid := range k.complete {
		if !asking[uid] {
			delete(k.complete, uid) // gone from the node: its UID never comes back
		}
	}
	maps.DeleteFunc(k.rechecked, func(uid types.UID, _ bool) bool { return !asking[uid] })
	k.mu.Unlock()
	if len(ask) == 0 || (!admitting(ctx) && remembered(ctx, out)) {
		k.observe(0)
		return out, nil
	}
	order(ask, k.Arrival)
	if !admitting(ctx) {
		hs, err := k.read(ctx, ask, unknownWindow)
		return append(out, hs...), err
	}
	// The kubelet is admitting one of these pods: read until it is found, or reuse the read of the
	// same pods since which no Allocate was answered (see KubeletChanged).
	key := uidsKey(ask)
	k.mu.Lock()
	reuse := k.lastAsked != "" && k.lastAsked == key && k.lastChanges == k.changes
	last, changes := k.last, k.changes
	k.mu.Unlock()
	if reuse {
		k.observe(0)
		return append(out, last...), nil
	}
	hs, err := k.read(ctx, ask, len(ask))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.last, k.lastAsked, k.lastChanges = hs, key, changes
	k.admitting = ""
	if n := len(hs); n > 0 && hs[n-1].Known() {
		k.admitting = admittingUID(ask, hs[n-1])
	}
	k.mu.Unlock()
	return append(out, hs...), nil
}

// admittingUID is the UID of the pod of ask that h names.
func admittingUID(ask []*corev1.Pod, h Holding) types.UID {
	for _, p := range ask {
		if p.Namespace == h.Namespace && p.Name == h.Pod {
			return p.UID
		}
	}
	return ""
}

func (k *Kubelet) observe(gets int) {
	if k.Observe != nil {
		k.Observe(gets)
	}
}

// uidsKey names a set of pods (IDsKey of their UIDs).
func uidsKey(ps []*corev1.Pod) string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = string(p.UID)
	}
	return IDsKey(ids)
}

// read asks the kubelet about the pods in its admission order, remembering the complete ones, until
// the pod it is admitting or window pods it does not know.
func (k *Kubelet) read(ctx context.Context, ask []*corev1.Pod, window int) ([]Holding, error) {
	gets := 0
	defer func() { k.observe(gets) }()
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", k.Socket, err)
	}
	defer func() { _ = conn.Close() }()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var out []Holding
	unknown := 0
	for _, p := range ask {
		if unknown == window {
			break // the kubelet has not received the pods after these yet
		}
		gets++
		hs, known, err := k.get(ctx, client, p)
		if err != nil {
			return nil, err
		}
		if !known {
			unknown++ // not known to the kubelet: it holds nothing
			continue
		}
		if complete(p, corev1.ResourceName(k.Resource), hs) {
			out = append(out, hs...)
			k.mu.Lock()
			k.complete[p.UID] = hs
			k.mu.Unlock()
			continue
		}
		// The pod the kubelet is admitting: the pods after it are not known to the kubelet yet.
		if len(hs) == 0 {
			hs = []Holding{{Namespace: p.Namespace, Pod: p.Name}}
		}
		return append(out, hs...), nil
	}
	return out, nil
}

// order sorts the pods to ask into the kubelet's admission order: the pods it has admitted (their
// status shows it) first, then the others (allocate.SortAdmission).
func order(ps []*corev1.Pod, arrival func(types.UID) (uint64, bool)) {
	allocate.SortAdmission(ps, func(uid types.UID) bool { return false }, arrival)
	sort.SliceStable(ps, func(i, j int) bool { return api.Admitted(ps[i]) && !api.Admitted(ps[j]) })
}

// complete reports whether every container of the pod that asks for res holds devices in hs.
func complete(p *corev1.Pod, res corev1.ResourceName, hs []Holding) bool {
	held := map[string]bool{}
	for _, h := range hs {
		held[h.Container] = len(h.IDs) > 0
	}
	for _, c := range api.KubeletDemand(p, res) {
		if c.Units > 0 && !held[c.Name] {
			return false
		}
	}
	return true
}

// get asks the kubelet about one pod: the devices of the resource its containers hold, and whether
// the kubelet knows the pod.
func (k *Kubelet) get(ctx context.Context, client podresourcesv1.PodResourcesListerClient, p *corev1.Pod) ([]Holding, bool, error) {
	resp, err := getPaced(ctx, client, &podresourcesv1.GetPodResourcesRequest{PodName: p.Name, PodNamespace: p.Namespace})
	if err != nil {
		switch st := status.Convert(err); {
		case st.Code() == codes.Unimplemented,
			// The kubelet answers a disabled Get with a plain error
			// (pkg/kubelet/apis/podresources/server_v1.go): its message is all there is to tell.
			st.Code() == codes.Unknown && strings.Contains(st.Message(), "Get method disabled"):
			return nil, false, fmt.Errorf("pod resources Get on %s: %w (%s)", k.Socket, ErrGetDisabled, st.Message())
		case st.Code() == codes.Unknown && strings.Contains(st.Message(), "not found"):
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("pod resources Get of %s/%s on %s: %w", p.Namespace, p.Name, k.Socket, err)
	}
	pr := resp.GetPodResources()
	var out []Holding
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
	return out, true, nil
}

// The kubelet's PodResources server refuses calls beyond its rate limit (100 per second, bursts of
// 10) with ResourceExhausted, for all its clients together. The plugin reads it per pod from its
// reconciler, its Allocate path and its memory sampler, so every Get of the process waits on one
// budget below the kubelet's, and a refused Get is asked again.
var podResourcesBudget = rate.NewLimiter(podResourcesQPS, podResourcesBurst)

const (
	// 80 of the kubelet's 100 a second: an admission costs one or two Gets, so this paces a burst
	// below the kubelet's own admission pace, and leaves room for the node's other PodResources
	// clients (metrics exporters); a Get the kubelet refuses is asked again.
	podResourcesQPS   = 80
	podResourcesBurst = 8
	// podResourcesRetries is how often a Get refused by the kubelet's rate limit is asked again
	// (each after the budget's next token).
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
