package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/conflict"
	"github.com/gpushare/gpushare/test/cluster"
)

// On a node whose status already advertises NVIDIA's device plugin
// (nvidia.com/gpu), gpushare's device plugin does not register with the
// kubelet: the node gets no gpushare inventory and no gpu-mem, and a Warning
// Event on the Node says why. Once the node no longer advertises it (the
// kubelet reports 0 for a plugin that went away), gpushare's plugin
// registers by itself.
func TestPluginDoesNotRegisterBesideAnotherGPUPlugin(t *testing.T) {
	c := setup(t)
	needRoot(t)
	plugin := pluginBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "other-plugin-1"
	names := api.DefaultNames()

	// The Node exists before the agent, as NVIDIA's plugin left it: the
	// agent keeps an existing Node and merges its own status into it.
	n, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelEnabled: api.LabelEnabledValue}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The controller-manager may write the new Node meanwhile (taints, annotations): retry on conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		n.Status.Allocatable = n.Status.Capacity
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	node, err := c.StartNode(cluster.NodeOptions{
		Name: name, AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
		PluginBinary: plugin, PluginArgs: []string{"--nvml=spec:1x16GiB"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent: %v", err)
		}
	})

	var event corev1.Event
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == name && e.Reason == conflict.Reason {
				event = e
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s Event on node %s: %v\nagent log: %s", conflict.Reason, name, err, node.LogFile())
	}
	if event.Type != corev1.EventTypeWarning {
		t.Errorf("Event %+v, want a Warning", event)
	}
	t.Logf("event: %s", event.Message)
	got, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[names.AnnotationInventory()]; ok {
		t.Errorf("node %s has a gpushare inventory beside NVIDIA's plugin", name)
	}
	if q, ok := got.Status.Capacity[names.ResourceName()]; ok && q.Sign() > 0 {
		t.Errorf("node %s advertises %s=%s beside NVIDIA's plugin: gpushare's plugin registered", name, names.ResourceName(), q.String())
	}

	// NVIDIA's plugin goes: the kubelet reports its resource at 0.
	patch := []byte(`{"status":{"capacity":{"nvidia.com/gpu":"0"},"allocatable":{"nvidia.com/gpu":"0"}}}`)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	waitInventory(ctx, t, c, node)
}
