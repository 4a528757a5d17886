package devicemanager

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// A kubelet that goes away leaves its Node as it was, and the next one fails every GPU pod it
// admits before the plugin registers with it. The plugin says in its inventory, the moment the
// kubelet's ListAndWatch stream ends, that the kubelet streams from it no longer (notServing),
// and clears it once the next kubelet streams again: the extender places no GPU pod meanwhile.
// The inventory is read as raw JSON, so that the test also runs, and fails, against a plugin
// that never writes the key.
func TestInventorySaysNotServingWhileTheKubeletIsDown(t *testing.T) {
	if reason := os.Getenv(envSkip); reason != "" {
		t.Skip(reason)
	}
	freshKubeletDir(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	k := startKubelet(t, nil)
	stop := startPlugin(t, client, "--pod-resources-socket=")
	defer func() { stop() }()
	k.waitCapacity(t, 16)
	waitNotServing(t, client, false, "the kubelet streams from the plugin")

	// The kubelet goes away (its device manager stops: every plugin connection closes).
	if err := k.m.Stop(klog.Background()); err != nil {
		t.Fatal(err)
	}
	waitNotServing(t, client, true, "the kubelet is gone")

	// The next kubelet: the plugin registers with it, and the inventory says it serves again.
	k = startKubelet(t, nil)
	defer func() { _ = k.m.Stop(klog.Background()) }()
	k.waitCapacity(t, 16)
	waitNotServing(t, client, false, "the next kubelet streams from the plugin")
}

// waitNotServing waits until the Node's inventory has (want) or lacks the notServing key.
func waitNotServing(t *testing.T, client *fake.Clientset, want bool, when string) {
	t.Helper()
	var raw string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		raw = n.Annotations[api.DefaultNames().AnnotationInventory()]
		var inv map[string]any
		if json.Unmarshal([]byte(raw), &inv) != nil {
			return false, nil
		}
		reason, _ := inv["notServing"].(string)
		return (reason != "") == want, nil
	})
	if err != nil {
		t.Errorf("%s: inventory %s; want notServing set: %v", when, raw, want)
	}
}
