package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

	dir := t.TempDir()
	keys := api.RecordKeys{Current: []byte(strings.Repeat("e2e-record-key-", 4))}
	if err := os.WriteFile(filepath.Join(dir, api.RecordKeyCurrent), keys.Current, 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "signed-node"
	node, inv := gpuNode(ctx, t, c, name, "1x24GiB:NVIDIA-L4", withLabels(""), withPluginArgs("--record-key-dir", dir))
	ns := testNamespace(ctx, t, c, "signed")

	// A pod placed by hand with a record naming the node's card, as a
	// tenant would write it (no policy refuses it in this namespace): held
	// by a scheduler that does not exist, given its record, then bound.
	withRecord := func(pod string, sign bool) *corev1.Pod {
		p := gpuPod(ns, pod, 8)
		p.Spec.SchedulerName = "nobody"
		created, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := api.Assignment{Version: api.AssignmentVersion, PodUID: created.UID, Node: name, Unit: api.UnitGiB, Phase: api.PhaseAssigned,
			Containers: []api.ContainerAssignment{{Name: "c0", CardUUID: inv.Cards[0].UUID, CardIndex: inv.Cards[0].Index, Units: 8}}}
		if sign {
			if a, err = keys.Sign(a); err != nil {
				t.Fatal(err)
			}
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
			Target: corev1.ObjectReference{Kind: "Node", Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return created
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
	if err != nil || keys.Verify(a) != nil {
		t.Errorf("the served pod's record %+v (%v) does not verify with the key after the plugin's update", a, err)
	}
}
