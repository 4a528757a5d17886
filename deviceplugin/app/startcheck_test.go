package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/conflict"
)

// The plugin does not register while NVIDIA's device plugin advertises the
// node's GPUs: it says why once in a Warning Event on the Node, and goes on
// once the node no longer advertises them.
func TestNoRegistrationWhileAnotherGPUPluginIsOnTheNode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", UID: "u-gpu-1"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}
	client := fake.NewClientset(node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		free bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		free, err := waitForNoOtherPlugin(ctx, client, client, "gpu-1", api.DefaultNames(), 10*time.Millisecond, klog.Background())
		done <- result{free, err}
	}()

	var events []corev1.Event
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		events = l.Items
		return err == nil && len(events) > 0, err
	}); err != nil {
		t.Fatalf("no Event on the Node: %v", err)
	}
	ev := events[0]
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "gpu-1" || ev.Reason != conflict.Reason || ev.Type != corev1.EventTypeWarning ||
		!strings.Contains(ev.Message, "nvidia.com/gpu=8") || !strings.Contains(ev.Message, "does not register") {
		t.Fatalf("Event = %+v", ev)
	}
	select {
	case r := <-done:
		t.Fatalf("returned %+v while NVIDIA's plugin is on the node", r)
	case <-time.After(100 * time.Millisecond):
	}

	node.Status.Capacity = corev1.ResourceList{}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if !r.free || r.err != nil {
			t.Fatalf("after the other plugin left: free %v, err %v", r.free, r.err)
		}
	case <-ctx.Done():
		t.Fatal("still waiting after the other plugin left")
	}
	if l, _ := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); len(l.Items) != 1 {
		t.Errorf("%d Events, want one for one finding", len(l.Items))
	}
}
