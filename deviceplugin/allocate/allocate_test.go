package allocate

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

const (
	node  = "gpu-node"
	card0 = "GPU-00000000-0000-0000-0000-000000000000"
	card1 = "GPU-11111111-1111-1111-1111-111111111111"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// podBuilder builds pods bound to node.
type podBuilder struct{ pod *corev1.Pod }

func makePod(name string, age int) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

func (b *podBuilder) container(name string, units int64) *podBuilder {
	c := corev1.Container{Name: name}
	if units > 0 {
		c.Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(units, resource.DecimalSI)}
	}
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, c)
	return b
}

func (b *podBuilder) initContainer(name string, units int64) *podBuilder {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(units, resource.DecimalSI)}}}
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, c)
	return b
}

// assign writes a valid assignment: cards[i] for the i-th gpu container.
func (b *podBuilder) assign(phase api.AssignmentPhase, cards ...string) *podBuilder {
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: b.pod.UID, Node: node, Unit: api.UnitGiB, Phase: phase}
	i := 0
	for _, c := range b.pod.Spec.Containers {
		q, ok := c.Resources.Limits[api.DefaultNames().ResourceName()]
		if !ok {
			continue
		}
		idx := 0
		if cards[i] == card1 {
			idx = 1
		}
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, CardUUID: cards[i], CardIndex: idx, Units: q.Value()})
		i++
	}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[api.DefaultNames().AnnotationAssignment()] = s
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder { b.pod.Status.Phase = p; return b }
func (b *podBuilder) started() *podBuilder {
	b.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "x"}}
	return b
}
func (b *podBuilder) obj() *corev1.Pod { return b.pod }

func ids(card string, from, n int64) []string {
	out := make([]string, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, api.UnitID(card, i))
	}
	return out
}

type key struct{ Pod, Container string }

func keys(q []Entry) []key {
	var out []key
	for _, e := range q {
		out = append(out, key{e.Pod, e.Container})
	}
	return out
}

func TestQueue(t *testing.T) {
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		allocated map[key]bool
		rejected  map[string]bool
		reopened  map[string]bool
		account   bool
		arrival   map[string]uint64
		want      []key
	}{
		{
			name: "same creation time is ordered by arrival, pods not seen yet last, then by UID",
			pods: []*corev1.Pod{
				makePod("a", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("b", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("c", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("d", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("older", 0).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
			},
			arrival: map[string]uint64{"uid-d": 7, "uid-b": 9, "uid-older": 10},
			want:    []key{{"older", "c"}, {"d", "c"}, {"b", "c"}, {"a", "c"}, {"c", "c"}},
		},
		{
			name: "with the kubelet's account an Allocated record is pending unless the kubelet shows the container",
			pods: []*corev1.Pod{
				makePod("guessed-before-restart", 1).container("c", 6).assign(api.PhaseAllocated, card0).obj(),
				makePod("really-done", 1).container("c", 6).assign(api.PhaseAllocated, card1).obj(),
			},
			allocated: map[key]bool{{"uid-really-done", "c"}: true},
			account:   true,
			want:      []key{{"guessed-before-restart", "c"}},
		},
		{
			name: "an Allocated record the kubelet contradicted is pending again",
			pods: []*corev1.Pod{
				makePod("guessed-wrong", 1).container("c", 6).assign(api.PhaseAllocated, card0).obj(),
				makePod("really-done", 2).container("c", 6).assign(api.PhaseAllocated, card1).obj(),
			},
			reopened: map[string]bool{"uid-guessed-wrong": true},
			want:     []key{{"guessed-wrong", "c"}},
		},
		{
			name: "pods in creation order, containers in spec order, non-gpu containers skipped",
			pods: []*corev1.Pod{
				makePod("young", 2).container("a", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("old", 1).container("a", 2).container("sidecar", 0).container("b", 3).assign(api.PhaseAssigned, card0, card1).obj(),
			},
			want: []key{{"old", "a"}, {"old", "b"}, {"young", "a"}},
		},
		{
			name: "same creation time is ordered by UID",
			pods: []*corev1.Pod{
				makePod("b", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
				makePod("a", 1).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
			},
			want: []key{{"a", "c"}, {"b", "c"}},
		},
		{
			name: "admitted, terminal, allocated and rejected pods leave the queue",
			pods: []*corev1.Pod{
				makePod("running", 1).container("c", 1).assign(api.PhaseAssigned, card0).phase(corev1.PodRunning).obj(),
				makePod("started", 2).container("c", 1).assign(api.PhaseAssigned, card0).started().obj(),
				makePod("failed", 3).container("c", 1).phase(corev1.PodFailed).obj(),
				makePod("done", 4).container("c", 1).assign(api.PhaseAllocated, card0).obj(),
				makePod("rejected", 5).container("c", 1).obj(),
				makePod("waiting", 6).container("c", 1).assign(api.PhaseAssigned, card0).obj(),
			},
			rejected: map[string]bool{"uid-rejected": true},
			want:     []key{{"waiting", "c"}},
		},
		{
			name: "a container already allocated leaves the queue, its sibling stays",
			pods: []*corev1.Pod{
				makePod("p", 1).container("a", 1).container("b", 1).assign(api.PhaseAssigned, card0, card1).obj(),
			},
			allocated: map[key]bool{{"uid-p", "a"}: true},
			want:      []key{{"p", "b"}},
		},
		{
			name: "init containers come first (and make the pod invalid)",
			pods: []*corev1.Pod{
				makePod("p", 1).initContainer("init", 2).container("a", 1).obj(),
			},
			want: []key{{"p", "init"}, {"p", "a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := Queue(tt.pods, State{
				Allocated:      func(uid types.UID, c string) bool { return tt.allocated[key{string(uid), c}] },
				Rejected:       func(uid types.UID) bool { return tt.rejected[string(uid)] },
				Reopened:       func(uid types.UID) bool { return tt.reopened[string(uid)] },
				KubeletAccount: tt.account,
				Arrival: func(uid types.UID) (uint64, bool) {
					n, ok := tt.arrival[string(uid)]
					return n, ok
				},
			})
			if diff := cmp.Diff(tt.want, keys(q)); diff != "" {
				t.Errorf("queue (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name          string
		pods          []*corev1.Pod
		ids           []string
		wantPod       string
		wantContainer string
		wantCard      string
		wantCorrected bool
		wantRepeat    bool
		wantErr       error
	}{
		{
			name:    "re-allocation of an admitted container on its recorded card is a repeat",
			pods:    []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAllocated, card1).phase(corev1.PodRunning).obj()},
			ids:     ids(card1, 4, 2),
			wantPod: "p", wantContainer: "c", wantCard: card1, wantRepeat: true,
		},
		{
			name:    "re-allocation on another card than recorded is not explained",
			pods:    []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAllocated, card1).phase(corev1.PodRunning).obj()},
			ids:     ids(card0, 0, 2),
			wantErr: ErrNoPending,
		},
		{
			name:    "single container gets its assigned card",
			pods:    []*corev1.Pod{makePod("p", 1).container("c", 4).assign(api.PhaseAssigned, card1).obj()},
			ids:     ids(card1, 0, 4),
			wantPod: "p", wantContainer: "c", wantCard: card1,
		},
		{
			name:    "the entry requesting exactly len(ids) units is chosen, skipping other sizes",
			pods:    []*corev1.Pod{makePod("big", 1).container("c", 8).assign(api.PhaseAssigned, card0).obj(), makePod("small", 2).container("c", 2).assign(api.PhaseAssigned, card1).obj()},
			ids:     ids(card1, 3, 2),
			wantPod: "small", wantContainer: "c", wantCard: card1,
		},
		{
			name:    "two same-size pods swapped: the oldest gets the offered card and its record is corrected",
			pods:    []*corev1.Pod{makePod("a", 1).container("c", 2).assign(api.PhaseAssigned, card0).obj(), makePod("b", 2).container("c", 2).assign(api.PhaseAssigned, card1).obj()},
			ids:     ids(card1, 0, 2),
			wantPod: "a", wantContainer: "c", wantCard: card1, wantCorrected: true,
		},
		{
			name:    "a bypass pod at the head of its size is refused",
			pods:    []*corev1.Pod{makePod("bypass", 1).container("c", 2).obj(), makePod("ok", 2).container("c", 2).assign(api.PhaseAssigned, card0).obj()},
			ids:     ids(card0, 0, 2),
			wantPod: "bypass", wantContainer: "c",
			wantErr: ErrNotScheduled,
		},
		{
			name:    "a bypass pod of another size does not block",
			pods:    []*corev1.Pod{makePod("bypass", 1).container("c", 3).obj(), makePod("ok", 2).container("c", 2).assign(api.PhaseAssigned, card0).obj()},
			ids:     ids(card0, 0, 2),
			wantPod: "ok", wantContainer: "c", wantCard: card0,
		},
		{
			name:    "ids of two cards are refused",
			pods:    []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAssigned, card0).obj()},
			ids:     append(ids(card0, 0, 1), ids(card1, 0, 1)...),
			wantErr: ErrSpansCards,
		},
		{
			name:    "no pending container of that size",
			pods:    []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAssigned, card0).obj()},
			ids:     ids(card0, 0, 3),
			wantErr: ErrNoPending,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Match(Build(tt.pods, State{}), tt.ids)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if d.Entry.Pod != tt.wantPod || d.Entry.Container != tt.wantContainer || d.CardUUID != tt.wantCard || d.Corrected != tt.wantCorrected || d.Repeat != tt.wantRepeat {
				t.Errorf("decision = %s/%s card %q corrected %v, want %s/%s card %q corrected %v", d.Entry.Pod, d.Entry.Container, d.CardUUID, d.Corrected, tt.wantPod, tt.wantContainer, tt.wantCard, tt.wantCorrected)
			}
		})
	}
}

func TestMatchBypassMessageSaysWhy(t *testing.T) {
	s := Build([]*corev1.Pod{makePod("by-hand", 1).container("c", 1).obj()}, State{})
	_, err := Match(s, ids(card0, 0, 1))
	want := "pod ns/by-hand has no gpushare assignment: pods requesting example.com/gpu-mem must be scheduled by gpushare-scheduler"
	if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("err = %v, want it to start with %q", err, want)
	}
}

func TestPreferred(t *testing.T) {
	avail := append(ids(card0, 0, 4), ids(card1, 0, 8)...)
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		available   []string
		mustInclude []string
		size        int
		want        []string
	}{
		{
			name:      "steers to the head's assigned card",
			pods:      []*corev1.Pod{makePod("p", 1).container("c", 3).assign(api.PhaseAssigned, card1).obj()},
			available: avail, size: 3,
			want: ids(card1, 0, 3),
		},
		{
			name:      "lowest unit numbers first, whatever the order offered",
			pods:      []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAssigned, card0).obj()},
			available: []string{api.UnitID(card0, 3), api.UnitID(card0, 1), api.UnitID(card0, 2)}, size: 2,
			want: []string{api.UnitID(card0, 1), api.UnitID(card0, 2)},
		},
		{
			name:      "the assigned card is full: best fit among the cards with room",
			pods:      []*corev1.Pod{makePod("p", 1).container("c", 5).assign(api.PhaseAssigned, card0).obj()},
			available: avail, size: 5,
			want: ids(card1, 0, 5),
		},
		{
			name:      "no head of that size: best fit picks the fuller card",
			available: avail, size: 2,
			want: ids(card0, 0, 2),
		},
		{
			name:      "no pending head: the recorded card of a running container of that size",
			pods:      []*corev1.Pod{makePod("p", 1).container("c", 2).assign(api.PhaseAllocated, card1).phase(corev1.PodRunning).obj()},
			available: avail, size: 2,
			want: ids(card1, 0, 2),
		},
		{
			name:      "no single card has room: no preference",
			available: avail, size: 9,
		},
		{
			name:      "must-include units are kept and completed from their card",
			available: avail, mustInclude: []string{api.UnitID(card1, 5)}, size: 3,
			want: []string{api.UnitID(card1, 5), api.UnitID(card1, 0), api.UnitID(card1, 1)},
		},
		{
			name:      "a unit offered twice counts once (found by FuzzAllocate)",
			available: []string{api.UnitID(card0, 1), api.UnitID(card0, 1), api.UnitID(card0, 2)}, size: 2,
			want: []string{api.UnitID(card0, 1), api.UnitID(card0, 2)},
		},
		{
			name:      "one unit offered many times is not enough for two",
			available: []string{api.UnitID(card0, 1), api.UnitID(card0, 1), api.UnitID(card0, 1)}, size: 2,
		},
		{
			name:      "a must-include unit named twice counts once",
			available: avail, mustInclude: []string{api.UnitID(card1, 5), api.UnitID(card1, 5)}, size: 2,
			want: []string{api.UnitID(card1, 5), api.UnitID(card1, 0)},
		},
		{
			name:      "more must-include units than the request: no preference",
			available: avail, mustInclude: ids(card1, 0, 3), size: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Preferred(Build(tt.pods, State{}), tt.available, tt.mustInclude, tt.size)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("preferred (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExplains: GetPreferredAllocation waits until each requested size has a
// container of its own, queued or recorded.
func TestExplains(t *testing.T) {
	s := Snapshot{
		Pending:  []Entry{{Pod: "a", Container: "c", Units: 2}, {Pod: "b", Container: "c", Units: 4}},
		Recorded: []Entry{{Pod: "r", Container: "c", Units: 8}},
	}
	cases := []struct {
		sizes []int
		want  bool
	}{
		{nil, true},
		{[]int{2}, true},
		{[]int{4, 2}, true},
		{[]int{8}, true},
		{[]int{2, 4, 8}, true},
		{[]int{3}, false},
		{[]int{2, 2}, false}, // one container explains one request
		{[]int{8, 8}, false},
	}
	for _, tc := range cases {
		if got := Explains(s, tc.sizes); got != tc.want {
			t.Errorf("Explains(sizes %v) = %v, want %v", tc.sizes, got, tc.want)
		}
	}
	if Explains(Snapshot{}, []int{1}) {
		t.Error("an empty snapshot explains a request")
	}
}
