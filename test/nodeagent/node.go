package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gpushare/gpushare/test/k8sversion"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// leaseDurationSeconds is the node lease's duration, as the kubelet's default.
const leaseDurationSeconds = 40

// baseCapacity is what the simulated node offers besides devices.
func baseCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// registerNode creates the Node if it does not exist. An existing Node is
// kept as it is (its labels, annotations and taints belong to whoever set
// them); only its status is the agent's.
func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.cfg.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   a.cfg.NodeName,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
			},
		},
	}
	for k, v := range a.cfg.Labels {
		node.Labels[k] = v
	}
	_, err := a.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("Registered node", "node", a.cfg.NodeName)
	case apierrors.IsAlreadyExists(err):
		klog.FromContext(ctx).Info("Node already registered", "node", a.cfg.NodeName)
	default:
		return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// nodeStatus is the status the agent reports: Ready, the base capacity plus
// the device manager's capacity and allocatable (zero for resources whose
// plugin went away, as the kubelet does).
func (a *Agent) nodeStatus(now time.Time, capacity, allocatable corev1.ResourceList, deleted []string) corev1.NodeStatus {
	st := corev1.NodeStatus{
		Capacity:    baseCapacity(),
		Allocatable: baseCapacity(),
		Conditions: []corev1.NodeCondition{{
			Type:               corev1.NodeReady,
			Status:             corev1.ConditionTrue,
			Reason:             "KubeletReady",
			Message:            a.readyMessage(),
			LastHeartbeatTime:  metav1.NewTime(now),
			LastTransitionTime: a.readySince,
		}},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: a.cfg.NodeName},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          k8sversion.Current(),
			OperatingSystem:         "linux",
			Architecture:            "amd64",
			ContainerRuntimeVersion: "gpushare-sim://1",
		},
	}
	for _, r := range deleted {
		st.Capacity[corev1.ResourceName(r)] = resource.MustParse("0")
		st.Allocatable[corev1.ResourceName(r)] = resource.MustParse("0")
	}
	for k, v := range capacity {
		st.Capacity[k] = v
	}
	for k, v := range allocatable {
		st.Allocatable[k] = v
	}
	return st
}

// readyMessage is the Ready condition's message. It names this agent process
// (PID and start time), so that a test that restarted the agent can tell when
// the new one has posted its status.
func (a *Agent) readyMessage() string {
	return fmt.Sprintf("gpushare simulated node agent is posting ready status (pid %d, started %s)", os.Getpid(), a.readySince.UTC().Format(time.RFC3339Nano))
}

// patchNodeStatus writes the status with a strategic merge patch on the
// status subresource, so conditions other agents or controllers own stay.
func (a *Agent) patchNodeStatus(ctx context.Context, st corev1.NodeStatus) error {
	body, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return fmt.Errorf("encode node status: %w", err)
	}
	_, err = a.cfg.Client.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status of node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// renewLease creates or renews the node's Lease in kube-node-lease, owned by
// the Node (as the kubelet does), so the node lifecycle controller keeps the
// node Ready between status updates.
func (a *Agent) renewLease(ctx context.Context, now time.Time) error {
	leases := a.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s for its lease: %w", a.cfg.NodeName, err)
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      a.cfg.NodeName,
				Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.cfg.NodeName),
				LeaseDurationSeconds: ptr.To[int32](leaseDurationSeconds),
				RenewTime:            &metav1.MicroTime{Time: now},
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease of node %s: %w", a.cfg.NodeName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease of node %s: %w", a.cfg.NodeName, err)
	}
	lease.Spec.HolderIdentity = ptr.To(a.cfg.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDurationSeconds)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease of node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}
