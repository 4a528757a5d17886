package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// wholeContainer builds a container whose limits hold q of DefaultNames().WholeResourceName().
func wholeContainer(name, q string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{DefaultNames().WholeResourceName(): resource.MustParse(q)}}}
}

func TestRequestFromPodWholeCards(t *testing.T) {
	both := container("both", "4", "")
	both.Resources.Limits[DefaultNames().WholeResourceName()] = resource.MustParse("1")
	tests := []struct {
		name      string
		init, app []corev1.Container
		wantShare []ContainerRequest
		wantWhole []WholeCardRequest
		wantErr   error
		errText   string
	}{
		{name: "a container asks for two whole cards", app: []corev1.Container{wholeContainer("train", "2")}, wantWhole: []WholeCardRequest{{Name: "train", Cards: 2}}},
		{
			name:      "containers of one pod may mix kinds",
			app:       []corev1.Container{container("share", "10", ""), wholeContainer("whole", "1"), {Name: "sidecar"}},
			wantShare: []ContainerRequest{{"share", 10}},
			wantWhole: []WholeCardRequest{{Name: "whole", Cards: 1}},
		},
		{name: "requests alone are used when no limit is set", app: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{DefaultNames().WholeResourceName(): resource.MustParse("3")}}}}, wantWhole: []WholeCardRequest{{Name: "c", Cards: 3}}},
		{name: "both kinds in one container are refused with what to do instead", app: []corev1.Container{both}, wantErr: ErrMixedRequest, errText: "separate containers"},
		{name: "zero whole cards is an error that says how to ask for none", app: []corev1.Container{wholeContainer("c", "0")}, wantErr: ErrInvalidRequest, errText: "leave example.com/gpu out"},
		{name: "a negative count is an error", app: []corev1.Container{wholeContainer("c", "-1")}, wantErr: ErrInvalidRequest, errText: "negative"},
		{name: "a fractional count points at gpu-mem", app: []corev1.Container{wholeContainer("c", "500m")}, wantErr: ErrInvalidRequest, errText: "ask for example.com/gpu-mem (memory) instead"},
		{name: "more than MaxWholeCards is an error", app: []corev1.Container{wholeContainer("c", "257")}, wantErr: ErrInvalidRequest, errText: "maximum 256 cards"},
		{name: "an init container asking for whole cards makes the pod invalid", init: []corev1.Container{wholeContainer("warm", "1")}, app: []corev1.Container{wholeContainer("c", "1")}, wantErr: ErrInitContainerRequest, errText: `init container "warm" asks for 1 whole cards`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.app}}
			got, err := DefaultNames().RequestFromPod(pod)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.errText)
				}
				if !got.Empty() {
					t.Errorf("an invalid request carries demands: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.wantShare, got.Containers); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWhole, got.WholeCards); diff != "" {
				t.Errorf("whole cards (-want +got):\n%s", diff)
			}
			if got.Empty() {
				t.Error("Empty() is true for a pod asking for GPUs")
			}
		})
	}
}

// mixedPod is a pod bound to n1 whose container "s" asks for 10 units and
// "w" for 2 whole cards, and its matching assignment.
func mixedPod() (*corev1.Pod, Assignment) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{container("s", "10", ""), wholeContainer("w", "2")}},
	}
	a := Assignment{Version: AssignmentVersion, PodUID: "uid-1", Node: "n1", Unit: UnitGiB, Phase: PhaseAssigned,
		Containers: []ContainerAssignment{{Name: "s", CardUUID: "GPU-a", CardIndex: 0, Units: 10}},
		WholeCards: []WholeCardAssignment{{Name: "w", CardUUIDs: []string{"GPU-b", "GPU-c"}, CardIndexes: []int{1, 2}}},
	}
	return pod, a
}

func TestAssignmentWholeCards(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*corev1.Pod, *Assignment)
		wantErr error
		text    string
	}{
		{name: "a record with whole cards and a share is believed"},
		{name: "a whole-card-only record is believed", mutate: func(p *corev1.Pod, a *Assignment) {
			p.Spec.Containers = p.Spec.Containers[1:]
			a.Containers = nil
		}},
		{name: "a card given whole and shared in one record is invalid", mutate: func(p *corev1.Pod, a *Assignment) { a.WholeCards[0].CardUUIDs[0] = "GPU-a" }, wantErr: ErrInvalidAssignment, text: "also holds shared memory"},
		{name: "a card given whole twice is invalid", mutate: func(p *corev1.Pod, a *Assignment) { a.WholeCards[0].CardUUIDs[1] = "GPU-b" }, wantErr: ErrInvalidAssignment, text: "given whole to both"},
		{name: "UUIDs and indexes must pair", mutate: func(p *corev1.Pod, a *Assignment) { a.WholeCards[0].CardIndexes = a.WholeCards[0].CardIndexes[:1] }, wantErr: ErrInvalidAssignment, text: "2 card UUIDs but 1 card indexes"},
		{name: "a container may not be in both lists", mutate: func(p *corev1.Pod, a *Assignment) { a.WholeCards[0].Name = "s" }, wantErr: ErrInvalidAssignment, text: "appears twice"},
		{name: "fewer cards than requested are not believed", mutate: func(p *corev1.Pod, a *Assignment) {
			a.WholeCards[0].CardUUIDs, a.WholeCards[0].CardIndexes = a.WholeCards[0].CardUUIDs[:1], a.WholeCards[0].CardIndexes[:1]
		}, wantErr: ErrInvalidAssignment, text: "requests 2 whole cards, the record grants 1"},
		{name: "a record without the whole-card entry is not believed", mutate: func(p *corev1.Pod, a *Assignment) { a.WholeCards = nil }, wantErr: ErrInvalidAssignment, text: "1 containers request example.com/gpu, the record has 0"},
		{name: "an entry with no cards is invalid", mutate: func(p *corev1.Pod, a *Assignment) {
			a.WholeCards[0].CardUUIDs, a.WholeCards[0].CardIndexes = nil, nil
		}, wantErr: ErrInvalidAssignment, text: "has 0 whole cards"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, a := mixedPod()
			if tc.mutate != nil {
				tc.mutate(pod, &a)
			}
			raw, err := jsonString(a)
			if err != nil {
				t.Fatal(err)
			}
			pod.Annotations = map[string]string{DefaultNames().AnnotationAssignment(): raw}
			got, err := DefaultNames().AssignmentFromPod(pod)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.text)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(a, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAssignmentWithoutWholeCardsKeepsItsEncoding: a record written before
// whole cards existed decodes, and re-encodes to the very same bytes (so
// its signature still verifies).
func TestAssignmentWithoutWholeCardsKeepsItsEncoding(t *testing.T) {
	const old = `{"version":1,"podUID":"uid-1","node":"n1","unit":"GiB","phase":"Allocated","containers":[{"name":"a","cardUUID":"GPU-a","cardIndex":0,"units":10}]}`
	a, err := DecodeAssignment(old)
	if err != nil {
		t.Fatalf("old record: %v", err)
	}
	if len(a.WholeCards) != 0 {
		t.Errorf("old record decoded with whole cards: %+v", a.WholeCards)
	}
	got, err := EncodeAssignment(a)
	if err != nil || got != old {
		t.Errorf("re-encoded = %s, %v; want the old bytes %s", got, err, old)
	}
	keys := extenderKeys(1)
	signed, err := keys.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	_, w := mixedPod()
	if err := keys.Verify(signed); err != nil {
		t.Errorf("old record's signature: %v", err)
	}
	sw, err := keys.Sign(w)
	if err != nil {
		t.Fatal(err)
	}
	sw.WholeCards[0].CardUUIDs[1] = "GPU-z"
	if err := keys.Verify(sw); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed whole card kept its signature: err = %v", err)
	}
}
