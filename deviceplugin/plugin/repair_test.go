package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

// withRecord sets the pod's record annotation to s verbatim ("" removes it).
func withRecord(p *corev1.Pod, s string) *corev1.Pod {
	if s == "" {
		delete(p.Annotations, api.DefaultNames().AnnotationAssignment())
		return p
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return p
}

// Reconciliation repairs: a running pod the kubelet holds units for whose
// record the plugin cannot trust — none, undecodable, not matching the
// pod's request, or (with a record key) not signed by it — gets its record
// rewritten from the kubelet's account: Allocated, each container on the card
// of the units the kubelet gave it, signed with the current key. A trusted
// record signed by the previous key of a rotation is signed again with the
// current one. A pod the kubelet holds nothing for, or one that finished,
// keeps whatever it carries.
func TestReconcileRewritesUntrustedRecordsFromTheKubeletsAccount(t *testing.T) {
	oldKey := podtest.RecordKeys(strings.Repeat("o", 32))
	keys := podtest.RotatingKeys(strings.Repeat("k", 32), oldKey.Current)
	const garbage = `{"version":1,"podUID":`
	tests := []struct {
		name string
		keys api.RecordKeys
		// pod is "p", requesting 4 units in container "c"; the kubelet
		// holds 4 units of card 1 for it when held.
		pod  func(c [2]podtest.Card) *corev1.Pod
		held bool
		// want: the record's phase and cards after reconciling; nil: the
		// annotation must be exactly what the pod carried.
		want []string
	}{
		{
			name: "record removed",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return withRecord(podtest.Bound(nodeName, "p", 1).GPU("c", 4).Phase(corev1.PodRunning).Obj(), "")
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "record garbled",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return withRecord(podtest.Bound(nodeName, "p", 1).GPU("c", 4).Phase(corev1.PodRunning).Obj(), garbage)
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "record granting other units than the container asks",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				p := podtest.Bound(nodeName, "p", 1).GPU("c", 4).Phase(corev1.PodRunning).Obj()
				a := api.Assignment{Version: 1, PodUID: p.UID, Node: nodeName, Unit: api.UnitGiB, Phase: api.PhaseAllocated,
					Containers: []api.ContainerAssignment{{Name: "c", CardUUID: c[0].UUID, Units: 2}}}
				s, _ := api.EncodeAssignment(a)
				return withRecord(p, s)
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "record for another node",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				p := podtest.Bound(nodeName, "p", 1).GPU("c", 4).Phase(corev1.PodRunning).Obj()
				a := api.Assignment{Version: 1, PodUID: p.UID, Node: "elsewhere", Unit: api.UnitGiB, Phase: api.PhaseAllocated,
					Containers: []api.ContainerAssignment{{Name: "c", CardUUID: c[1].UUID, CardIndex: 1, Units: 4}}}
				s, _ := api.EncodeAssignment(a)
				return withRecord(p, s)
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "with a key: unsigned record naming another card",
			keys: keys,
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAllocated, c[0]).Phase(corev1.PodRunning).Obj()
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "with a key: signed record moved to another card afterwards",
			keys: keys,
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAllocated, c[1]).
					Sign(keys).EditAssignment(func(a *api.Assignment) { a.Containers[0].CardUUID, a.Containers[0].CardIndex = c[0].UUID, 0 }).Phase(corev1.PodRunning).Obj()
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "with a key: record signed by the previous key is signed again",
			keys: keys,
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return podtest.Bound(nodeName, "p", 1).GPU("c", 4).Assign(api.PhaseAllocated, c[1]).Sign(oldKey).Phase(corev1.PodRunning).Obj()
			},
			held: true, want: []string{"Allocated", "c=card1"},
		},
		{
			name: "the kubelet holds nothing for the pod: left alone",
			keys: keys,
			pod: func(c [2]podtest.Card) *corev1.Pod {
				return withRecord(podtest.Bound(nodeName, "p", 1).GPU("c", 4).Obj(), garbage)
			},
		},
		{
			name: "finished pod: left alone",
			pod: func(c [2]podtest.Card) *corev1.Pod {
				p := withRecord(podtest.Bound(nodeName, "p", 1).GPU("c", 4).Obj(), garbage)
				p.Status.Phase = corev1.PodSucceeded
				return p
			},
			held: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before string
			h := newHarness(t, setup{podres: true, cfg: Config{RecordKeys: tt.keys}, pods: func(c [2]podtest.Card) []*corev1.Pod {
				p := tt.pod(c)
				before = p.Annotations[api.DefaultNames().AnnotationAssignment()]
				return []*corev1.Pod{p}
			}})
			if tt.held {
				h.podres.set(podresources.Holding{Namespace: "ns", Pod: "p", Container: "c", IDs: unitIDs(h.cards[1].UUID, 0, 4)})
			}
			if err := h.plugin.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			p, err := h.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := p.Annotations[api.DefaultNames().AnnotationAssignment()]
			if tt.want == nil {
				if got != before {
					t.Errorf("the record changed to %q; it must be left alone", got)
				}
				return
			}
			a, err := api.DefaultNames().AssignmentFromPod(p)
			if err != nil {
				t.Fatalf("after reconciling, the record is still invalid: %v", err)
			}
			cards := strings.NewReplacer(h.cards[0].UUID, "card0", h.cards[1].UUID, "card1").Replace(strings.Join(cardsOf(a), " "))
			if diff := cmp.Diff(strings.Join(tt.want, " "), cards); diff != "" {
				t.Errorf("record after reconciling (-want +got):\n%s", diff)
			}
			if a.Containers[0].CardIndex != 1 {
				t.Errorf("card index %d, want 1", a.Containers[0].CardIndex)
			}
			if tt.keys.Enabled() && !tt.keys.SignedByCurrent(a) {
				t.Errorf("the rewritten record is not signed by the current key (verify: %v)", tt.keys.Verify(a))
			}
		})
	}
}
