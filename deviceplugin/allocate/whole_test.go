package allocate

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

func TestMatchCards(t *testing.T) {
	both := Cards{card0, card1}
	tests := []struct {
		name    string
		pods    []*corev1.Pod
		account bool
		use     Use
		cards   Cards
		want    string // container chosen
		repeat  bool
		err     error
	}{
		{
			name:  "the first waiting container of that size gets the cards",
			pods:  []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 2).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c0, c1}).Obj(), podtest.Bound(node, "b", 0).Whole("w", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c0}).Obj()},
			cards: both, want: "a/w",
		},
		{
			name:  "a card holding units is refused",
			pods:  []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 2).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c0, c1}).Obj()},
			use:   Use{Shared: map[string]string{card1: "ns/x container c"}},
			cards: both, err: ErrCardInUse,
		},
		{
			name:  "without the kubelet's account, a record giving exactly these cards is a repeat",
			pods:  []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 2).AssignWhole(api.PhaseAllocated, nil, []podtest.Card{c0, c1}).Obj()},
			use:   Use{Whole: map[string]string{card0: "ns/a container w"}},
			cards: both, want: "a/w", repeat: true,
		},
		{
			name:    "with the kubelet's account the record proves nothing: the cards are in use",
			pods:    []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 2).AssignWhole(api.PhaseAllocated, nil, []podtest.Card{c0, c1}).Phase(corev1.PodRunning).Obj()},
			account: true,
			use:     Use{Whole: map[string]string{card0: "ns/a container w"}},
			cards:   both, err: ErrCardInUse,
		},
		{
			name:  "a pod without a record is refused",
			pods:  []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 2).Obj()},
			cards: both, want: "a/w", err: ErrCardsNotScheduled,
		},
		{
			name:  "no waiting container of that size",
			pods:  []*corev1.Pod{podtest.Bound(node, "a", 1).Whole("w", 1).AssignWhole(api.PhaseAssigned, nil, []podtest.Card{c0}).Obj()},
			cards: both, err: ErrNoPendingCards,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := MatchCards(BuildCards(tt.pods, State{KubeletAccount: tt.account}, tt.use), tt.cards)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			got := ""
			if d.Entry.Pod != "" {
				got = d.Entry.Pod + "/" + d.Entry.Container
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || d.Repeat != tt.repeat {
				t.Errorf("container (-want +got):\n%s repeat = %v, want %v", diff, d.Repeat, tt.repeat)
			}
		})
	}
}

func TestPreferredCardsSteersToTheAssignedCards(t *testing.T) {
	pending := []CardEntry{{Pod: "a", Container: "w", Cards: 1, Assigned: []string{card1}}}
	all := []string{card0, card1}
	if diff := cmp.Diff([]string{card1}, PreferredCards(pending, Use{}, all, all, nil, 1)); diff != "" {
		t.Errorf("assigned card free (-want +got):\n%s", diff)
	}
	use := Use{Shared: map[string]string{card1: "ns/x container c"}}
	if diff := cmp.Diff([]string{card0}, PreferredCards(pending, use, all, all, nil, 1)); diff != "" {
		t.Errorf("assigned card in use: the lowest free card (-want +got):\n%s", diff)
	}
}

func TestParseCards(t *testing.T) {
	known := func(id string) bool { return id == card0 || id == card1 }
	if got, err := ParseCards([]string{card1, card0}, known, "example.com/gpu"); err != nil || !cmp.Equal(got, Cards{card0, card1}) {
		t.Errorf("ParseCards = %v, %v; want sorted", got, err)
	}
	for _, ids := range [][]string{nil, {card0, card0}, {"GPU-unknown"}} {
		if _, err := ParseCards(ids, known, "example.com/gpu"); !errors.Is(err, ErrCardID) {
			t.Errorf("ParseCards(%v) = %v, want ErrCardID", ids, err)
		}
	}
}
