package burstbench

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/api"
)

// A burst that asks for more GPU memory than the nodes have free is refused
// before any pod is created, with what to change; one that fits goes on.
// Finished pods and pods not bound hold nothing.
func TestFitsRefusesABurstTheClusterCannotHold(t *testing.T) {
	res := api.DefaultNames().ResourceName()
	node := func(name string, units int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{res: *resource.NewQuantity(units, resource.DecimalSI)}}}
	}
	pod := func(name, node string, units int64, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: *resource.NewQuantity(units, resource.DecimalSI)}}}}}, Status: corev1.PodStatus{Phase: phase}}
	}
	client := fake.NewClientset(node("a", 40), node("b", 40),
		pod("held", "a", 30, corev1.PodRunning), pod("done", "b", 40, corev1.PodSucceeded), pod("pending", "", 40, corev1.PodPending))
	ctx := context.Background()
	if err := fits(ctx, client, 50); err != nil {
		t.Errorf("50 of 50 free: %v", err)
	}
	err := fits(ctx, client, 51)
	if err == nil || !strings.Contains(err.Error(), "have 50 free") || !strings.Contains(err.Error(), "lower -pods or -gib") {
		t.Errorf("51 of 50 free: %v; want a refusal naming 50 free and what to lower", err)
	}
}
