// Package schedload puts scheduling load on a control plane that has no node
// agents: GPU nodes as API objects (gpushare's inventory annotation,
// example.com/gpu-mem allocatable, Ready and untainted), bursts of gpu-mem
// pods created at once by concurrent clients, a recorder of when each pod was
// bound, and the checks afterwards (every pod bound with a valid assignment
// record, no card over capacity). It also reads the extender's Prometheus
// metrics and a process's CPU time.
//
// The e2e burst test (test/e2e) and the scheduling benchmark
// (test/schedbench, `make bench-scheduling`) share it.
package schedload

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/k8sversion"
)

// Fleet is a set of identical GPU nodes that exist only as API objects.
type Fleet struct {
	// Prefix names the nodes: Prefix-00000, Prefix-00001, ...
	Prefix string
	// Nodes is how many nodes, CardsPerNode how many cards each, CardUnits
	// the units (GiB) of every card.
	Nodes        int
	CardsPerNode int
	CardUnits    int64
}

// Name is the name of node i.
func (f Fleet) Name(i int) string { return fmt.Sprintf("%s-%05d", f.Prefix, i) }

// Names are the fleet's node names.
func (f Fleet) Names() []string {
	names := make([]string, f.Nodes)
	for i := range names {
		names[i] = f.Name(i)
	}
	return names
}

// Cards is the number of cards in the fleet.
func (f Fleet) Cards() int { return f.Nodes * f.CardsPerNode }

// Inventory is what a device plugin would publish for the named node: every
// card healthy, CardUnits GiB, a UUID unique in the fleet
// ("GPU-<node>-<index>").
func (f Fleet) Inventory(node string) api.Inventory {
	inv := api.Inventory{Version: api.InventoryVersion, Unit: api.UnitGiB}
	for i := range f.CardsPerNode {
		inv.Cards = append(inv.Cards, api.Card{
			Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "NVIDIA H100 80GB HBM3",
			MemoryMiB: f.CardUnits * api.UnitGiB.MiB(), Units: f.CardUnits, State: api.CardHealthy,
		})
	}
	return inv
}

// NodeCapacity is the non-GPU capacity of every fleet node: large enough that
// only gpu-mem limits where pods go.
var NodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("256"),
	corev1.ResourceMemory: resource.MustParse("2Ti"),
	corev1.ResourcePods:   resource.MustParse("1000"),
}

// Node is the named node as CreateNodes creates it: gpushare's label and
// inventory annotation, allocatable gpu-mem equal to the inventory's units,
// status Ready.
func (f Fleet) Node(name string) (*corev1.Node, error) {
	inv, err := api.EncodeInventory(f.Inventory(name))
	if err != nil {
		return nil, err
	}
	res := NodeCapacity.DeepCopy()
	res[api.DefaultNames().ResourceName()] = *resource.NewQuantity(int64(f.CardsPerNode)*f.CardUnits, resource.DecimalSI)
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{api.LabelEnabled: "true", corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{api.DefaultNames().AnnotationInventory(): inv},
		},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message:           "gpushare schedload: an API-object node, no kubelet",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: k8sversion.Current()},
		},
	}, nil
}

// CreateNodes creates the fleet's Nodes, workers at a time. The API server
// keeps the status given at creation (Ready, capacity), but its
// TaintNodesByCondition admission adds node.kubernetes.io/not-ready:NoSchedule
// to every new Node, and only the node lifecycle controller removes it; so
// CreateNodes removes it itself (with the controller running, whichever comes
// first). A node that already exists is an error.
//
// With the node lifecycle controller running, the nodes turn NotReady after
// its grace period (~50 s) unless their leases are renewed: see
// StartHeartbeat.
func CreateNodes(ctx context.Context, client kubernetes.Interface, f Fleet, workers int) error {
	return ForEach(ctx, f.Nodes, workers, func(ctx context.Context, i int) error {
		node, err := f.Node(f.Name(i))
		if err != nil {
			return err
		}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
		return untaint(ctx, client, created)
	})
}

// untaint removes the not-ready taint admission put on a new node.
func untaint(ctx context.Context, client kubernetes.Interface, node *corev1.Node) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var kept []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, gerr := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			node = fresh
		}
		if err != nil {
			return fmt.Errorf("remove the not-ready taint of node %s: %w", node.Name, err)
		}
		return nil
	})
}

// DeleteNodes deletes the fleet's Nodes (their leases go with them: they are
// owned by the Node), workers at a time; a node already gone is no error.
func DeleteNodes(ctx context.Context, client kubernetes.Interface, f Fleet, workers int) error {
	return ForEach(ctx, f.Nodes, workers, func(ctx context.Context, i int) error {
		err := client.CoreV1().Nodes().Delete(ctx, f.Name(i), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete node %s: %w", f.Name(i), err)
		}
		return nil
	})
}

// Heartbeat renews the fleet's node Leases in kube-node-lease, as kubelets
// do, so that the node lifecycle controller keeps API-object nodes Ready.
type Heartbeat struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// LeaseDurationSeconds is the duration written in the heartbeat's leases
// (the kubelet's default).
const LeaseDurationSeconds = 40

// StartHeartbeat creates (or takes over) a Lease for every fleet node, owned
// by the Node, and renews them all every period (the kubelet renews every
// 10 s; the controller's grace period is ~50 s) until Stop.
func StartHeartbeat(ctx context.Context, client kubernetes.Interface, f Fleet, period time.Duration, workers int) (*Heartbeat, error) {
	leases := make([]*coordinationv1.Lease, f.Nodes)
	err := ForEach(ctx, f.Nodes, workers, func(ctx context.Context, i int) error {
		l, err := createLease(ctx, client, f.Name(i))
		leases[i] = l
		return err
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &Heartbeat{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := ForEach(ctx, f.Nodes, workers, func(ctx context.Context, i int) error {
				l, err := renewLease(ctx, client, leases[i])
				if err == nil {
					leases[i] = l
				}
				return err
			})
			if err != nil && ctx.Err() == nil {
				h.err = err
				return
			}
		}
	}()
	return h, nil
}

// Stop stops the renewals and returns the first error they met.
func (h *Heartbeat) Stop() error {
	h.cancel()
	<-h.done
	return h.err
}

func createLease(ctx context.Context, client kubernetes.Interface, name string) (*coordinationv1.Lease, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s for its lease: %w", name, err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](LeaseDurationSeconds),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := leases.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("lease of node %s: %w", name, gerr)
		}
		return renewLease(ctx, client, existing)
	}
	if err != nil {
		return nil, fmt.Errorf("create lease of node %s: %w", name, err)
	}
	return created, nil
}

func renewLease(ctx context.Context, client kubernetes.Interface, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	var out *coordinationv1.Lease
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l = l.DeepCopy()
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		var err error
		out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := leases.Get(ctx, l.Name, metav1.GetOptions{}); gerr == nil {
				l = fresh
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew lease of node %s: %w", l.Name, err)
	}
	return out, nil
}
