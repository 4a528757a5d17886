package plugin

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// laggingCache is a pod cache that has not shown the plugin's record writes since freeze:
// Pods shows the pods as they were then, and RecordAhead says so while ahead. Record updates
// are counted.
type laggingCache struct {
	Cluster
	mu      sync.Mutex
	frozen  []*corev1.Pod
	ahead   bool
	updates int
}

func (c *laggingCache) freeze() {
	pods, _ := c.Cluster.Pods()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen, c.ahead = pods, true
}

func (c *laggingCache) Pods() ([]*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen == nil {
		return c.Cluster.Pods()
	}
	out := make([]*corev1.Pod, len(c.frozen))
	for i, p := range c.frozen {
		out[i] = p.DeepCopy()
	}
	return out, nil
}

func (c *laggingCache) RecordAhead(*corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ahead
}

func (c *laggingCache) UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error {
	c.mu.Lock()
	c.updates++
	c.mu.Unlock()
	return c.Cluster.UpdateAssignment(ctx, namespace, name, uid, mutate)
}

func (c *laggingCache) counted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.updates
	c.updates = 0
	return n
}

// Reconciliation during a burst leaves alone a record the plugin has just written and the pod
// cache does not show yet: writing it again would only be refused (the record is not the one
// the cache shows) and read back. A record the cache shows at its latest version, and not as the
// ledger says, is written.
func TestReconcileLeavesARecordTheCacheHasYetToShow(t *testing.T) {
	lag := &laggingCache{}
	// Without the kubelet's account the record writer writes the phase (with it, a record naming
	// the right card is not written at all).
	h := newHarness(t, setup{
		wrap: func(c Cluster) Cluster { lag.Cluster = c; return lag },
		pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c[1]).Obj()}
		},
	})
	lag.freeze() // the cache shows the extender's record, Assigned
	ids := unitIDs(h.cards[1].UUID, 0, 2)
	h.mustAllocate(t, ids)
	if a := h.record(t, "p"); a.Phase != api.PhaseAllocated {
		t.Fatalf("the record writer left phase %s, want Allocated", a.Phase)
	}
	lag.counted()
	ctx := context.Background()
	if err := h.plugin.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lag.counted(); n != 0 {
		t.Errorf("reconciliation wrote (or read) %d records the plugin had just written and the cache did not show yet; want none", n)
	}
	// The cache at its latest version still shows Assigned (someone else's write): reconciled.
	lag.mu.Lock()
	lag.ahead = false
	lag.mu.Unlock()
	if err := h.plugin.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lag.counted(); n == 0 {
		t.Error("reconciliation left a record the cache shows at its latest version, not as the ledger says; want it written")
	}
}
