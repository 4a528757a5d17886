package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpushare/gpushare/api"
	memusage "github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// Root on a GPU node of a default install holds the device plugin's two
// credentials: its pod's service account token (the chart's RBAC) and the
// node's own identity (the kubelet's kubeconfig, devicePlugin.nodeCredential),
// which the API server's Node authorizer confines to that node. With either,
// reading every pod, another node's pods or another Node is refused, and no
// API-server setting beyond the Node authorizer (kubeadm's default) is
// needed. The plugin still works with them, under the chart's policies on
// its events and evictions: a GPU pod is admitted and, using more GPU memory
// than granted, evicted.
func TestDevicePluginCredentialsReadOnlyTheirNode(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const system, nodeA, nodeB = "gpushare-node-cred", "cred-a", "cred-b"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), system, metav1.DeleteOptions{})
	})
	users := testNamespace(ctx, t, c, "cred-tenant")
	b, _ := gpuNode(ctx, t, c, nodeB, "1x40GiB:NVIDIA-A100")
	onNode := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		return p
	}
	podB := runPod(ctx, t, c, onNode(gpuPod(users, "pod-b", 10), nodeB), b)

	// The plugin on cred-a as the chart installs it: its service account
	// (the chart's default RBAC, a token bound to its pod on cred-a) writes,
	// the node's own identity reads.
	dir := t.TempDir()
	saConfig := pluginConfigOn(ctx, t, c, system, nodeA)
	saKubeconfig := filepath.Join(dir, "plugin.kubeconfig")
	if err := writeTokenKubeconfig(saKubeconfig, saConfig, filepath.Join(c.StateDir(), "pki", "ca.crt")); err != nil {
		t.Fatal(err)
	}
	nodeKubeconfig, err := c.NodeKubeconfig(nodeA, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(saConfig)
	if err != nil {
		t.Fatal(err)
	}
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	// As root on cred-a would, with each credential the plugin holds.
	for _, id := range []struct {
		name   string
		client kubernetes.Interface
	}{{"the service account token", sa}, {"the node's identity", node}} {
		refused := func(what string, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: %s: %v, want Forbidden", id.name, what, err)
			}
		}
		_, err := id.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		refused("list every pod", err)
		_, err = id.client.CoreV1().Pods(users).List(ctx, metav1.ListOptions{})
		refused("list a namespace's pods", err)
		_, err = id.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB})
		refused("list another node's pods", err)
		_, err = id.client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		refused("watch every pod", err)
		_, err = id.client.CoreV1().Pods(users).Get(ctx, podB.Name, metav1.GetOptions{})
		refused("get another node's pod", err)
		_, err = id.client.CoreV1().Nodes().Get(ctx, nodeB, metav1.GetOptions{})
		refused("get another Node", err)
		_, err = id.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		refused("list every Node", err)
	}

	// The token reads nothing at all: its own node's pods are the node identity's to read.
	if _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA}); !apierrors.IsForbidden(err) {
		t.Errorf("the service account token listing its own node's pods: %v, want Forbidden", err)
	}

	// The chart's policies on the plugin's events and evictions apply to the
	// tenant's namespace; once they refuse a forged event on pod-b, with and
	// without the plugin's label, the plugin's own are checked too.
	applyAdmissionPolicySubset(ctx, t, c, system, []string{"gpushare-plugin-events", "gpushare-plugin-pod-scope", "gpushare-plugin-pod-label"})
	enforceAdmission(ctx, t, c, system, users)
	forged := func(labels map[string]string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: users, Labels: labels},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: users, Name: podB.Name},
			Type:           corev1.EventTypeWarning, Reason: memusage.ReasonOverGrant, Source: corev1.EventSource{Host: nodeA}}
	}
	for _, want := range []struct {
		labels map[string]string
		says   string
	}{{map[string]string{api.DefaultNames().LabelDevicePlugin(): nodeA}, "may write events on only pods bound to its own node"}, {nil, "has no such label"}} {
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = sa.CoreV1().Events(users).Create(ctx, forged(want.labels), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last != nil && strings.Contains(last.Error(), want.says), nil
		}); err != nil {
			t.Fatalf("the policies do not refuse an event on pod-b (labels %v) saying %q; last answer: %v", want.labels, want.says, last)
		}
	}

	procs := filepath.Join(c.NodeStateDir(nodeA), nodeagent.GPUProcessesFileName)
	a, _ := gpuNode(ctx, t, c, nodeA, "1x16GiB", withPluginArgs("--kubeconfig="+saKubeconfig, "--node-kubeconfig="+nodeKubeconfig,
		"--memory-enforcement=evict", "--memory-sample-interval=250ms", "--memory-grace=2s", "--nvml-sim-processes="+procs))
	logs := "\nplugin log: " + filepath.Join(c.NodeStateDir(nodeA), "plugin.log")

	// The plugin works with them: a pod granted 4 GiB that uses 6 GiB is
	// admitted (the plugin read it with the node's identity and wrote its
	// record with the token), then evicted for its use.
	over := onNode(gpuPod(users, "over", 4), nodeA)
	over.Annotations = map[string]string{api.DefaultNames().AnnotationSimulatedGPUUse(): "c0=6144"}
	over = runPod(ctx, t, c, over, a)
	if rec, err := api.DefaultNames().AssignmentFromPod(over); err != nil || rec.Node != nodeA {
		t.Errorf("over's record: %+v, %v; want one for %s", rec, err, nodeA)
	}
	own, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA})
	if err != nil {
		t.Fatalf("the node's identity listing its own node's pods: %v", err)
	}
	if !slices.ContainsFunc(own.Items, func(p corev1.Pod) bool { return p.UID == over.UID }) || slices.ContainsFunc(own.Items, func(p corev1.Pod) bool { return p.UID == podB.UID }) {
		t.Errorf("the node's identity lists %d pods of %s; want over among them, pod-b not", len(own.Items), nodeA)
	}
	if err := waitEvent(ctx, c, users, "over", memusage.ReasonEvicted); err != nil {
		t.Fatalf("no %s event on over: %v%s", memusage.ReasonEvicted, err, logs)
	}
	if err := cluster.WaitPodGone(ctx, c.Client, users, "over", time.Minute); err != nil {
		t.Errorf("over not evicted: %v%s", err, logs)
	}
}

// writeTokenKubeconfig writes a kubeconfig for cfg's server and bearer token.
func writeTokenKubeconfig(file string, cfg *rest.Config, caFile string) error {
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: plugin, user: {token: %q}}]
contexts: [{name: plugin, context: {cluster: local, user: plugin}}]
current-context: plugin
`, cfg.Host, caFile, cfg.BearerToken)
	return os.WriteFile(file, []byte(content), 0o600)
}
