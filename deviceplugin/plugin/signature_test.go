package plugin

import (
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// With record keys, a container gets a card only from a record the extender
// signed: a record written by anyone else (a tenant, where the admission
// policies are not installed) or changed after signing gives no GPU, the
// Allocate error says why, and the plugin never signs it. A signed record is
// served, and the plugin's update of it (phase Allocated) is signed again,
// with the plugin's own node key. A record signed by another node's key (root
// on that node) is refused: a node's key vouches for its own pods only.
func TestAllocateTrustsOnlySignedRecords(t *testing.T) {
	keys := podtest.RecordKeys(strings.Repeat("k", 32))
	plugin := podtest.NodeKeys(keys, nodeName, "this node")
	otherNode := podtest.NodeKeys(keys, "other-node", "other node")
	otherNode.Node = nodeName // a compromised node signing for this one
	tests := []struct {
		name string
		pod  func(c [2]podtest.Card) *corev1.Pod
		want string
		err  error
	}{
		{
			name: "unsigned (forged) record",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Obj()
			},
			want: "its gpushare assignment record is not trusted, so it gets no GPU: the assignment record is not signed",
			err:  api.ErrUnsigned,
		},
		{
			name: "signed, then moved to another card",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[0]).
					Sign(keys).EditAssignment(func(a *api.Assignment) { a.Containers[0].CardUUID, a.Containers[0].CardIndex = c[1].UUID, c[1].Index }).Obj()
			},
			want: "the assignment record's signature does not match",
			err:  api.ErrBadSignature,
		},
		{
			name: "signed by another node's key",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Sign(otherNode).Obj()
			},
			want: "is not signed by the key node \"" + nodeName + "\" publishes",
			err:  api.ErrBadSignature,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, setup{cfg: Config{RecordKeys: plugin}, pods: func(c [2]podtest.Card) []*corev1.Pod { return []*corev1.Pod{tt.pod(c)} }})
			_, err := h.allocate(t, unitIDs(h.cards[1].UUID, 0, 4))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Allocate = %v, want an error containing %q", err, tt.want)
			}
			a := h.record(t, "p")
			if a.Phase != api.PhaseAssigned {
				t.Errorf("the untrusted record became %s; the plugin must leave it alone", a.Phase)
			}
			if verr := plugin.Verify(a); !errors.Is(verr, tt.err) {
				t.Errorf("after Allocate the record verifies as %v, want %v (not signed by the plugin)", verr, tt.err)
			}
		})
	}

	t.Run("signed record", func(t *testing.T) {
		h := newHarness(t, setup{cfg: Config{RecordKeys: plugin}, pods: func(c [2]podtest.Card) []*corev1.Pod {
			return []*corev1.Pod{podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Sign(keys).Obj()}
		}})
		r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 4))
		if got := mountedCard(t, r); got != h.cards[1].UUID {
			t.Errorf("mounted card %s, want %s", got, h.cards[1].UUID)
		}
		a := h.record(t, "p")
		if a.Phase != api.PhaseAllocated {
			t.Errorf("record phase %s, want Allocated", a.Phase)
		}
		if err := plugin.Verify(a); err != nil || !strings.HasPrefix(a.Signature, "ed25519:node:") {
			t.Errorf("the plugin's update is not signed with its node key: %q, %v", a.Signature, err)
		}
		if err := keys.PublicOnly().Verify(a); !errors.Is(err, api.ErrBadSignature) {
			t.Errorf("the plugin's update verified without its node's published key: %v", err)
		}
	})
}

// swappableKeys is a keyring whose keys a test replaces, as
// internal/recordkey.Ring does when the Secret changes.
type swappableKeys struct {
	mu   sync.Mutex
	keys api.RecordKeys
}

func (s *swappableKeys) Keys() api.RecordKeys {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

func (s *swappableKeys) set(k api.RecordKeys) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = k
}

// The plugin takes the keys in force at each decision: a record signed with
// a key the running plugin does not hold yet is refused, and served once the
// keyring holds that key (a rotation reaching the plugin without a restart).
func TestAllocateUsesTheKeysInForceNow(t *testing.T) {
	oldKeys := podtest.RecordKeys(strings.Repeat("o", 32))
	newKeys := podtest.RotatingKeys(strings.Repeat("n", 32), oldKeys.Current)
	ring := &swappableKeys{keys: oldKeys}
	h := newHarness(t, setup{cfg: Config{RecordKeys: ring}, pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "a", 1).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Sign(newKeys).Obj(),
			podtest.Bound(nodeName, "b", 2).GPU("c", 4).Assign(api.PhaseAssigned, c[1]).Sign(newKeys).Obj(),
		}
	}})
	if _, err := h.allocate(t, unitIDs(h.cards[1].UUID, 0, 4)); err == nil || !strings.Contains(err.Error(), "signature does not match") {
		t.Fatalf("Allocate with the old key = %v, want the record refused", err)
	}
	// The kubelet fails pod a; the same record signature on pod b is served
	// once the keyring holds the new key.
	ring.set(newKeys)
	r := h.mustAllocate(t, unitIDs(h.cards[1].UUID, 0, 4))
	if got := mountedCard(t, r); got != h.cards[1].UUID {
		t.Errorf("mounted card %s, want %s", got, h.cards[1].UUID)
	}
	if a := h.record(t, "b"); !newKeys.SignedByCurrent(a) {
		t.Errorf("the plugin's update is not signed with the key now current")
	}
}
