package cache_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// A node's key vouches for its own pods only: the cache counts a correction
// signed by the pod's own node with the key that node publishes, not one
// signed by another node's key, and reads a node's corrections again when
// the node's published key changes.
func TestNodeSignedRecordsCountOnlyWithTheirOwnNodesKey(t *testing.T) {
	ext := podtest.RecordKeys("extender")
	nodeA := podtest.NodeKeys(ext, "a", "key-of-a")
	nodeB := podtest.NodeKeys(ext, "b", "key-of-b")
	published := func(name string, k api.RecordKeys) *corev1.Node {
		return fixture.MakeNode(name).Card(0, 40).Card(1, 40).
			Annotation(api.DefaultNames().AnnotationRecordKey(), api.NodeKeyAnnotation(k.Nodes.NodeKey(name))).Obj()
	}
	pod := podtest.Make("ns", "p").GPU("main", 30).Node("a").Phase(corev1.PodRunning).Obj()
	record := func(k api.RecordKeys, card int) *corev1.Pod {
		t.Helper()
		s, err := k.Sign(podtest.AssignmentFor(pod, "a", api.PhaseAllocated, card))
		if err != nil {
			t.Fatal(err)
		}
		p := pod.DeepCopy()
		p.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): podtest.MustEncode(s)}
		return p
	}
	// Root on node b signs a record for a pod on node a with b's key.
	forger := nodeB
	forger.Node = "a"

	c := cache.New(cache.WithRecordKeys(ext))
	c.SetNode(published("a", nodeA))
	c.SetNode(published("b", nodeB))
	c.SetPod(record(forger, 1))
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 0}, used(c, "a")); diff != "" {
		t.Errorf("node b's forged record was counted (-want +got):\n%s", diff)
	}
	c.SetPod(record(nodeA, 0))
	if st, _ := c.PodState(pod.UID); st != cache.Confirmed {
		t.Errorf("node a's own correction: state %q, want %q", st, cache.Confirmed)
	}
	if diff := cmp.Diff(map[int]int64{0: 30, 1: 0}, used(c, "a")); diff != "" {
		t.Errorf("node a's own correction (-want +got):\n%s", diff)
	}

	// Node a's plugin restarts with a new key: its old correction no longer
	// verifies (the cache remembers it until the plugin signs it again).
	restarted := podtest.NodeKeys(ext, "a", "new-key-of-a")
	c.SetNode(published("a", restarted))
	if st, _ := c.PodState(pod.UID); st != cache.Remembered {
		t.Errorf("after node a published a new key, its old correction: state %q, want %q", st, cache.Remembered)
	}
	// A correction that arrives before the key it was signed with is not
	// counted until the key arrives; then it is, without another pod event.
	later := podtest.NodeKeys(ext, "a", "later-key-of-a")
	c.SetPod(record(later, 1))
	if st, _ := c.PodState(pod.UID); st != cache.Remembered {
		t.Errorf("a correction with a key node a does not publish yet: state %q, want %q", st, cache.Remembered)
	}
	c.SetNode(published("a", later))
	if st, _ := c.PodState(pod.UID); st != cache.Confirmed {
		t.Errorf("once node a publishes the key its correction was signed with: state %q, want %q", st, cache.Confirmed)
	}
	if diff := cmp.Diff(map[int]int64{0: 0, 1: 30}, used(c, "a")); diff != "" {
		t.Errorf("after node a's key arrived (-want +got):\n%s", diff)
	}
}
