package allocate

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

const (
	node  = "gpu-node"
	card0 = "GPU-00000000-0000-0000-0000-000000000000"
	card1 = "GPU-11111111-1111-1111-1111-111111111111"
)

// c0 and c1 are the cards as assignments name them.
var (
	c0 = podtest.Card{UUID: card0, Index: 0}
	c1 = podtest.Card{UUID: card1, Index: 1}
)

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
		admitting map[string]bool
		want      []key
	}{
		{
			name: "the pod the kubelet is admitting comes first, whatever its creation time and arrival",
			pods: []*corev1.Pod{
				podtest.Bound(node, "older", 0).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "first-seen", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "admitting", 1).GPU("c", 1).Assign(api.PhaseAssigned, c1).Obj(),
			},
			account:   true,
			arrival:   map[string]uint64{"uid-older": 1, "uid-first-seen": 2, "uid-admitting": 3},
			admitting: map[string]bool{"uid-admitting": true},
			want:      []key{{"admitting", "c"}, {"older", "c"}, {"first-seen", "c"}},
		},
		{
			name: "same creation time is ordered by arrival, pods not seen yet last, then by UID",
			pods: []*corev1.Pod{
				podtest.Bound(node, "a", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "b", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "c", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "d", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "older", 0).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
			},
			arrival: map[string]uint64{"uid-d": 7, "uid-b": 9, "uid-older": 10},
			want:    []key{{"older", "c"}, {"d", "c"}, {"b", "c"}, {"a", "c"}, {"c", "c"}},
		},
		{
			name: "with the kubelet's account an Allocated record is pending unless the kubelet shows the container",
			pods: []*corev1.Pod{
				podtest.Bound(node, "guessed-before-restart", 1).GPU("c", 6).Assign(api.PhaseAllocated, c0).Obj(),
				podtest.Bound(node, "really-done", 1).GPU("c", 6).Assign(api.PhaseAllocated, c1).Obj(),
			},
			allocated: map[key]bool{{"uid-really-done", "c"}: true},
			account:   true,
			want:      []key{{"guessed-before-restart", "c"}},
		},
		{
			name: "an Allocated record the kubelet contradicted is pending again",
			pods: []*corev1.Pod{
				podtest.Bound(node, "guessed-wrong", 1).GPU("c", 6).Assign(api.PhaseAllocated, c0).Obj(),
				podtest.Bound(node, "really-done", 2).GPU("c", 6).Assign(api.PhaseAllocated, c1).Obj(),
			},
			reopened: map[string]bool{"uid-guessed-wrong": true},
			want:     []key{{"guessed-wrong", "c"}},
		},
		{
			name: "pods in creation order, containers in spec order, non-gpu containers skipped",
			pods: []*corev1.Pod{
				podtest.Bound(node, "young", 2).GPU("a", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "old", 1).GPU("a", 2).Container("sidecar").GPU("b", 3).Assign(api.PhaseAssigned, c0, c1).Obj(),
			},
			want: []key{{"old", "a"}, {"old", "b"}, {"young", "a"}},
		},
		{
			name: "same creation time is ordered by UID",
			pods: []*corev1.Pod{
				podtest.Bound(node, "b", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
				podtest.Bound(node, "a", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
			},
			want: []key{{"a", "c"}, {"b", "c"}},
		},
		{
			name: "admitted, terminal, allocated and rejected pods leave the queue",
			pods: []*corev1.Pod{
				podtest.Bound(node, "running", 1).GPU("c", 1).Assign(api.PhaseAssigned, c0).Phase(corev1.PodRunning).Obj(),
				podtest.Bound(node, "started", 2).GPU("c", 1).Assign(api.PhaseAssigned, c0).Started().Obj(),
				podtest.Bound(node, "failed", 3).GPU("c", 1).Phase(corev1.PodFailed).Obj(),
				podtest.Bound(node, "done", 4).GPU("c", 1).Assign(api.PhaseAllocated, c0).Obj(),
				podtest.Bound(node, "rejected", 5).GPU("c", 1).Obj(),
				podtest.Bound(node, "waiting", 6).GPU("c", 1).Assign(api.PhaseAssigned, c0).Obj(),
			},
			rejected: map[string]bool{"uid-rejected": true},
			want:     []key{{"waiting", "c"}},
		},
		{
			name: "a container already allocated leaves the queue, its sibling stays",
			pods: []*corev1.Pod{
				podtest.Bound(node, "p", 1).GPU("a", 1).GPU("b", 1).Assign(api.PhaseAssigned, c0, c1).Obj(),
			},
			allocated: map[key]bool{{"uid-p", "a"}: true},
			want:      []key{{"p", "b"}},
		},
		{
			name: "init containers come first (and make the pod invalid)",
			pods: []*corev1.Pod{
				podtest.Bound(node, "p", 1).InitGPU("init", 2).GPU("a", 1).Obj(),
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
				Admitting:      func(uid types.UID) bool { return tt.admitting[string(uid)] },
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
			pods:    []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAllocated, c1).Phase(corev1.PodRunning).Obj()},
			ids:     ids(card1, 4, 2),
			wantPod: "p", wantContainer: "c", wantCard: card1, wantRepeat: true,
		},
		{
			name:    "re-allocation on another card than recorded is not explained",
			pods:    []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAllocated, c1).Phase(corev1.PodRunning).Obj()},
			ids:     ids(card0, 0, 2),
			wantErr: ErrNoPending,
		},
		{
			name:    "single container gets its assigned card",
			pods:    []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 4).Assign(api.PhaseAssigned, c1).Obj()},
			ids:     ids(card1, 0, 4),
			wantPod: "p", wantContainer: "c", wantCard: card1,
		},
		{
			name:    "the entry requesting exactly len(ids) units is chosen, skipping other sizes",
			pods:    []*corev1.Pod{podtest.Bound(node, "big", 1).GPU("c", 8).Assign(api.PhaseAssigned, c0).Obj(), podtest.Bound(node, "small", 2).GPU("c", 2).Assign(api.PhaseAssigned, c1).Obj()},
			ids:     ids(card1, 3, 2),
			wantPod: "small", wantContainer: "c", wantCard: card1,
		},
		{
			name:    "two same-size pods swapped: the oldest gets the offered card and its record is corrected",
			pods:    []*corev1.Pod{podtest.Bound(node, "a", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj(), podtest.Bound(node, "b", 2).GPU("c", 2).Assign(api.PhaseAssigned, c1).Obj()},
			ids:     ids(card1, 0, 2),
			wantPod: "a", wantContainer: "c", wantCard: card1, wantCorrected: true,
		},
		{
			name:    "a bypass pod at the head of its size is refused",
			pods:    []*corev1.Pod{podtest.Bound(node, "bypass", 1).GPU("c", 2).Obj(), podtest.Bound(node, "ok", 2).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()},
			ids:     ids(card0, 0, 2),
			wantPod: "bypass", wantContainer: "c",
			wantErr: ErrNotScheduled,
		},
		{
			name:    "a bypass pod of another size does not block",
			pods:    []*corev1.Pod{podtest.Bound(node, "bypass", 1).GPU("c", 3).Obj(), podtest.Bound(node, "ok", 2).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()},
			ids:     ids(card0, 0, 2),
			wantPod: "ok", wantContainer: "c", wantCard: card0,
		},
		{
			name:    "ids of two cards are refused",
			pods:    []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()},
			ids:     append(ids(card0, 0, 1), ids(card1, 0, 1)...),
			wantErr: ErrSpansCards,
		},
		{
			name:    "no pending container of that size",
			pods:    []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()},
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
	s := Build([]*corev1.Pod{podtest.Bound(node, "by-hand", 1).GPU("c", 1).Obj()}, State{})
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
			pods:      []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c1).Obj()},
			available: avail, size: 3,
			want: ids(card1, 0, 3),
		},
		{
			name:      "lowest unit numbers first, whatever the order offered",
			pods:      []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()},
			available: []string{api.UnitID(card0, 3), api.UnitID(card0, 1), api.UnitID(card0, 2)}, size: 2,
			want: []string{api.UnitID(card0, 1), api.UnitID(card0, 2)},
		},
		{
			name:      "the assigned card is full: best fit among the cards with room",
			pods:      []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 5).Assign(api.PhaseAssigned, c0).Obj()},
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
			pods:      []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAllocated, c1).Phase(corev1.PodRunning).Obj()},
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

// Match is MatchUnits for device IDs not yet parsed.
func Match(s Snapshot, ids []string) (Decision, error) {
	u, err := ParseUnits(ids)
	if err != nil {
		return Decision{}, err
	}
	return MatchUnits(s, u)
}
