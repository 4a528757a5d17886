package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Where the admission policies are not installed, a tenant can still write a
// record on its pod; with a record key (the chart's default) the device
// plugin gives a card only for records the extender signed. On a node whose
// plugin holds the key, a pod carrying a forged record gets no GPU, and the
// kubelet's error says why; the same pod with a record signed by the key is
// served.
func TestForgedRecordGetsNoGPUWithoutThePolicies(t *testing.T) {
	c := setup(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	keys, dir := extenderKeyDir(t)
	const name = "signed-node"
	node, inv := gpuNode(ctx, t, c, name, "1x24GiB:NVIDIA-L4", withLabels(""), withPluginArgs("--record-key-dir", dir))
	ns := testNamespace(ctx, t, c, "signed")

	withRecord := func(pod string, sign bool) *corev1.Pod {
		signer := api.RecordKeys{}
		if sign {
			signer = keys
		}
		return placeWithRecord(ctx, t, c, ns, pod, name, inv, signer)
	}
	forged := withRecord("forged", false)
	got, err := cluster.WaitPod(ctx, c.Client, ns, forged.Name, time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if err != nil {
		t.Fatalf("%v\nagent log: %s", err, node.LogFile())
	}
	if got.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(got.Status.Message, "not trusted, so it gets no GPU") || !strings.Contains(got.Status.Message, "not signed") {
		t.Errorf("forged record: reason %q message %q, want UnexpectedAdmissionError saying the record is not trusted (not signed)", got.Status.Reason, got.Status.Message)
	}
	t.Logf("forged record: %s", got.Status.Message)

	signed := withRecord("signed", true)
	running := waitRunning(ctx, t, c, ns, signed.Name, node)
	a, err := api.DefaultNames().AssignmentFromPod(running)
	if err != nil || verifier(ctx, t, c, keys, name).Verify(a) != nil {
		t.Errorf("the served pod's record %+v (%v) does not verify with the extender's public key and the node's published key after the plugin's update", a, err)
	}
}

// Root on a GPU node holds that node's plugin key (and may publish any key
// on its own Node), but no key that signs assignments: a record it signs
// for a pod bound to another node is not trusted by that node's plugin,
// while the node's own corrections of its own pods are.
func TestCompromisedNodeCannotVouchForAnotherNodesPod(t *testing.T) {
	c := setup(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	keys, dir := extenderKeyDir(t)
	nodeA, invA := gpuNode(ctx, t, c, "node-a", "2x24GiB:NVIDIA-L4", withLabels(""), withPluginArgs("--record-key-dir", dir))
	nodeB, invB := gpuNode(ctx, t, c, "node-b", "1x24GiB:NVIDIA-L4", withLabels(""), withPluginArgs("--record-key-dir", dir))
	ns := testNamespace(ctx, t, c, "node-keys")

	// Node a's own correction (phase Allocated) is signed with its node key
	// and trusted with the key published on node a. A correction: three pods
	// fill card 0, and a fourth recorded on card 0 gets units of card 1.
	for _, name := range []string{"fill-1", "fill-2", "fill-3"} {
		waitRunning(ctx, t, c, ns, placeWithRecord(ctx, t, c, ns, name, "node-a", invA, keys).Name, nodeA)
	}
	own := placeWithRecord(ctx, t, c, ns, "own", "node-a", invA, keys)
	running := waitRunning(ctx, t, c, ns, own.Name, nodeA)
	a, err := api.DefaultNames().AssignmentFromPod(running)
	if err != nil || a.Phase != api.PhaseAllocated || a.Containers[0].CardUUID != invA.Cards[1].UUID || !strings.HasPrefix(a.Signature, "ed25519:node:") {
		t.Fatalf("node a's correction: %+v, %v; want phase Allocated on card 1, signed by the node", a, err)
	}
	if err := verifier(ctx, t, c, keys, "node-a").Verify(a); err != nil {
		t.Errorf("node a's correction of its own pod does not verify with node a's published key: %v", err)
	}

	// Root on node a: a key of its own, published on its own Node (as its
	// plugin's identity may), signing a record for a pod bound to node b.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + api.DefaultNames().AnnotationRecordKey() + `":"` + api.NodeKeyAnnotation(pub) + `"}}}`)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rogue := keys.PublicOnly()
	rogue.Signer, rogue.Node = priv, "node-b" // signs as a node, for node b
	forged := placeWithRecord(ctx, t, c, ns, "forged", "node-b", invB, rogue)
	got, err := cluster.WaitPod(ctx, c.Client, ns, forged.Name, time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if err != nil {
		t.Fatalf("%v\nnode b agent log: %s", err, nodeB.LogFile())
	}
	if got.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(got.Status.Message, "not trusted, so it gets no GPU") || !strings.Contains(got.Status.Message, `node "node-b"`) {
		t.Errorf("record for node b signed by node a's key: reason %q message %q, want UnexpectedAdmissionError saying it is not trusted", got.Status.Reason, got.Status.Message)
	}
	t.Logf("forged record: %s", got.Status.Message)
	if err := verifier(ctx, t, c, keys, "node-b").Verify(mustRecord(t, got)); err == nil {
		t.Error("the extender's view (node b's published key) trusts the record node a signed")
	}
}

// extenderKeyDir makes an extender key and a directory holding its public
// half, as the public-key ConfigMap gives it to the device plugins.
func extenderKeyDir(t *testing.T) (api.RecordKeys, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, api.RecordKeyCurrent), []byte(api.NodeKeyAnnotation(pub)), 0o600); err != nil {
		t.Fatal(err)
	}
	return api.RecordKeys{Current: pub, Signer: priv}, dir
}

// verifier is what the extender verifies records of node with: the
// extender's public keys and the key node publishes.
func verifier(ctx context.Context, t *testing.T, c *cluster.Cluster, ext api.RecordKeys, node string) api.RecordKeys {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := ext.PublicOnly()
	if pub, err := api.ParsePublicKey(n.Annotations[api.DefaultNames().AnnotationRecordKey()]); err == nil {
		k.Nodes = api.NodeKeyMap{node: pub}
	}
	return k
}

func mustRecord(t *testing.T, p *corev1.Pod) api.Assignment {
	t.Helper()
	a, err := api.DecodeAssignment(p.Annotations[api.DefaultNames().AnnotationAssignment()])
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// placeWithRecord places a pod by hand with a record naming the node's
// first card, as a tenant (or a compromised node) would write it (no policy
// refuses it in the test's namespace): held by a scheduler that does not
// exist, given its record (signed by signer when it has a key), then bound.
func placeWithRecord(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, pod, node string, inv api.Inventory, signer api.RecordKeys) *corev1.Pod {
	t.Helper()
	p := gpuPod(ns, pod, 8)
	p.Spec.SchedulerName = "nobody"
	created, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: created.UID, Node: node, Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "c0", CardUUID: inv.Cards[0].UUID, CardIndex: inv.Cards[0].Index, Units: 8}}}
	if a, err = signer.Sign(a); err != nil {
		t.Fatal(err)
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	created.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	if _, err := c.Client.CoreV1().Pods(ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns, UID: created.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}
