package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
	dpcluster "github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/k8sversion"
)

// nodeScopeNamespace holds the device plugin identity the suite's API server
// confines to its node: the extender runs the node-scope webhook for its
// service account (nodeScopeAuthorization).
const nodeScopeNamespace = "gpushare-node-scope"

// nodeScopeUser is the chart's device plugin service account in
// nodeScopeNamespace (pluginIdentityOn creates it).
const nodeScopeUser = "system:serviceaccount:" + nodeScopeNamespace + ":gpushare-device-plugin"

// nodeScopeAuthorization writes, under state, what an operator configures
// for the node-scope webhook from the chart's output (docs/security.md): the
// chart's Secret <release>-node-scope-tls (the extender's serving
// certificate), and from <release>-node-scope-apiserver the webhook's
// kubeconfig and the authorizer entry, put before RBAC in kube-apiserver's
// AuthorizationConfiguration. It returns the configuration file and the
// extender's flags, as the chart sets them.
func nodeScopeAuthorization(state string) (string, []string, error) {
	port, err := cluster.FreePort()
	if err != nil {
		return "", nil, err
	}
	root := cluster.RepoRoot()
	helm, err := exec.Command(filepath.Join(root, "hack", "tools.sh"), "helm").Output()
	if err != nil {
		return "", nil, fmt.Errorf("hack/tools.sh helm: %w", err)
	}
	out, err := exec.Command(strings.TrimSpace(string(helm)), "template", "gpushare", filepath.Join(root, "charts", "gpushare"),
		"--kube-version", k8sversion.Current(), "--namespace", nodeScopeNamespace, "--show-only", "templates/node-scope.yaml",
		"--set", "nodeScope.enabled=true", "--set", fmt.Sprintf("nodeScope.serverURL=https://127.0.0.1:%d/authorize", port),
		"--set", "scheduler.extender.tls.extraSANs={127.0.0.1}").CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("helm template the node-scope webhook: %w\n%s", err, out)
	}
	secrets := map[string]corev1.Secret{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var s corev1.Secret
		if err := yaml.Unmarshal(doc, &s); err != nil {
			return "", nil, err
		}
		secrets[s.Name] = s
	}
	tlsSecret, apiserver := secrets["gpushare-node-scope-tls"], secrets["gpushare-node-scope-apiserver"]
	if len(tlsSecret.Data["tls.crt"]) == 0 || apiserver.StringData["authorizer.yaml"] == "" {
		return "", nil, fmt.Errorf("the chart's node-scope Secrets are not as expected:\n%s", out)
	}
	if !strings.Contains(apiserver.StringData["authorizer.yaml"], "'"+nodeScopeUser+"'") {
		return "", nil, fmt.Errorf("the chart's authorizer entry does not match the device plugin's user %s:\n%s", nodeScopeUser, apiserver.StringData["authorizer.yaml"])
	}
	dir := filepath.Join(state, "node-scope")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	kubeconfig := filepath.Join(dir, "webhook.kubeconfig")
	authorizer := strings.ReplaceAll(apiserver.StringData["authorizer.yaml"], "/etc/kubernetes/gpushare-node-scope.kubeconfig", kubeconfig)
	files := map[string]string{
		"tls.crt":            string(tlsSecret.Data["tls.crt"]),
		"tls.key":            string(tlsSecret.Data["tls.key"]),
		"webhook.kubeconfig": apiserver.StringData["webhook.kubeconfig"],
		"authorization.yaml": "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Node\n  name: node\n" + authorizer + "- type: RBAC\n  name: rbac\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return "", nil, err
		}
	}
	return filepath.Join(dir, "authorization.yaml"), []string{
		"--node-scope-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--node-scoped-users", nodeScopeUser,
		"--node-scope-tls-cert-file", filepath.Join(dir, "tls.crt"),
		"--node-scope-tls-private-key-file", filepath.Join(dir, "tls.key"),
	}, nil
}

// The device plugin's identity, taken by root on a GPU node (its pod's
// token), reads only its own node's pods and Node: the node-scope webhook
// the API server asks before RBAC denies the rest, each denial saying what to
// ask instead, and the plugin's own client code works under it.
func TestDevicePluginReadsOnlyItsOwnNode(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodeScopeNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), nodeScopeNamespace, metav1.DeleteOptions{})
	})
	users := testNamespace(ctx, t, c, "scope-tenant")
	nodeA, _ := gpuNode(ctx, t, c, "scope-a", "1x40GiB:NVIDIA-A100")
	nodeB, _ := gpuNode(ctx, t, c, "scope-b", "1x40GiB:NVIDIA-A100")
	onNode := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		return p
	}
	podA := runPod(ctx, t, c, onNode(gpuPod(users, "pod-a", 10), "scope-a"), nodeA)
	podB := runPod(ctx, t, c, onNode(gpuPod(users, "pod-b", 10), "scope-b"), nodeB)
	// Where the plugin cannot read with its node's own identity, its service account reads.
	plugin := pluginIdentityOn(ctx, t, c, nodeScopeNamespace, "scope-a", "--set", "devicePlugin.nodeCredential.kubeconfig=")

	// As root on scope-a would, with the plugin's token.
	_, err := plugin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	wantError(t, "list every pod", err, "may list only the pods of its own node: add the field selector spec.nodeName=scope-a")
	_, err = plugin.CoreV1().Pods(users).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=scope-b"})
	wantError(t, "list the pods of another node", err, "may list only the pods of its own node")
	_, err = plugin.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	wantError(t, "watch every pod", err, "may watch only the pods of its own node")
	_, err = plugin.CoreV1().Pods(users).Get(ctx, podB.Name, metav1.GetOptions{})
	wantError(t, "get another node's pod", err, "may not get a pod by name", "list pods with the field selector spec.nodeName=scope-a,metadata.name=pod-b instead")
	_, err = plugin.CoreV1().Nodes().Get(ctx, "scope-b", metav1.GetOptions{})
	wantError(t, "get another Node", err, "may get only its own Node scope-a")
	_, err = plugin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	wantError(t, "list every Node", err, "add the field selector metadata.name=scope-a")

	// The same service account with a token bound to no pod names no node.
	tr, err := c.Client.CoreV1().ServiceAccounts(nodeScopeNamespace).CreateToken(ctx, "gpushare-device-plugin", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.RESTConfig)
	cfg.BearerToken = tr.Status.Token
	unbound, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = unbound.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=scope-a"})
	wantError(t, "a token bound to no pod", err, "this token names no node")

	// Its own node's pods and Node are readable.
	own, err := plugin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=scope-a"})
	if err != nil {
		t.Fatalf("listing its own node's pods: %v", err)
	}
	var names []string
	for _, p := range own.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if !slices.Contains(names, users+"/pod-a") || slices.Contains(names, users+"/pod-b") {
		t.Errorf("its own node's pods: %v, want %s/pod-a and not pod-b", names, users)
	}
	if _, err := plugin.CoreV1().Nodes().Get(ctx, "scope-a", metav1.GetOptions{}); err != nil {
		t.Errorf("getting its own Node: %v", err)
	}

	// The device plugin's client code (informers, record rewrites) works
	// with only these reads.
	cl := dpcluster.New(plugin, "scope-a")
	startCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := cl.Start(startCtx); err != nil {
		t.Fatalf("the plugin's informers under the webhook: %v", err)
	}
	if err := cl.CheckNode(ctx); err != nil {
		t.Errorf("the plugin's node check: %v", err)
	}
	pods, err := cl.Pods()
	if err != nil || !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.UID == podA.UID }) {
		t.Errorf("the plugin's pods: %d, %v; want pod-a among them", len(pods), err)
	}
	read := false
	if err := cl.UpdateAssignment(ctx, users, podA.Name, podA.UID, func(a *api.Assignment) bool { read = a.Node == "scope-a"; return false }); err != nil || !read {
		t.Errorf("the plugin reading pod-a's record to rewrite it: read %v, %v", read, err)
	}
	if err := cl.UpdateAssignment(ctx, users, podB.Name, podB.UID, func(*api.Assignment) bool { t.Error("the plugin on scope-a read pod-b's record"); return false }); err != nil {
		t.Errorf("a pod of another node is left alone: %v", err)
	}
}
