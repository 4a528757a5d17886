package allocate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// Whole cards: the same decision as for units (Queue, Match, Preferred),
// for a container request of whole cards (api.Names.WholeResourceName). The
// kubelet keeps a second account for that resource and knows nothing of its
// sharing the cards with gpu-mem; Use is what keeps the two apart.

// ErrCardInUse: the cards are held the other way (a refusal that keeps the
// kubelet's two accounts apart).
var ErrCardInUse = errors.New("card in use the other way")

// ErrNoPendingCards: no waiting container asks for that many whole cards.
var ErrNoPendingCards = errors.New("no pod on this node waits for that many whole cards")

// ErrCardsNotScheduled: the container's pod has no valid record or breaks
// the contract.
var ErrCardsNotScheduled = errors.New("whole cards refused")

// CardEntry is a container waiting for its whole cards.
type CardEntry struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
	// Cards is how many cards it asks for.
	Cards int
	// Assigned are the cards its record names, sorted (nil: no valid
	// record); Err says why the pod gets no card (no valid record, a broken
	// request).
	Assigned []string
	Err      error
}

// Use is which cards are held, and by whom, the one way or the other.
type Use struct {
	// Shared: card UUID → a holder of units of it ("ns/pod container c").
	Shared map[string]string
	// Whole: card UUID → the holder of the card whole.
	Whole map[string]string
}

// InUse reports whether any of the cards is held, either way.
func (u Use) InUse(cards []string) bool {
	for _, c := range cards {
		_, shared := u.Shared[c]
		_, whole := u.Whole[c]
		if shared || whole {
			return true
		}
	}
	return false
}

// CardSnapshot is what the whole-card matching decides over.
type CardSnapshot struct {
	// Pending is the queue of whole-card containers (CardQueue).
	Pending []CardEntry
	// Recorded, without the kubelet's account only: containers of pods that
	// may start containers, admitted or recorded Allocated, with the cards
	// their record gives them (a restarted plugin's memory).
	Recorded []CardEntry
	// Use is what is held on each card.
	Use Use
	// Names are the resource names, for the reasons.
	Names api.Names
}

// BuildCards takes a whole-card snapshot of the pods bound to the node.
// st.Allocated reports containers the ledger shows holding cards; use is
// what is held on each card.
func BuildCards(pods []*corev1.Pod, st State, use Use) CardSnapshot {
	names := st.Names.OrDefault()
	decode := memoDecode(names, st.Keys)
	s := CardSnapshot{Pending: cardQueue(pods, st, decode), Use: use, Names: names}
	if !st.KubeletAccount {
		s.Recorded = cardRecorded(pods, decode)
	}
	return s
}

// cardQueue is the queue of whole-card containers not yet allocated, in the
// kubelet's admission order (creation time, arrival, UID; init containers,
// then app containers, in spec order).
//
// A pod the kubelet admitted (api.Admitted) waits for nothing; without the
// kubelet's account (st.KubeletAccount false), neither does a pod whose
// record is Allocated and not reopened: its containers hold their cards
// (re-allocations of those are repeats, CardSnapshot.Recorded).
func cardQueue(pods []*corev1.Pod, st State, decode decodeFunc) []CardEntry {
	names := st.Names.OrDefault()
	var out []CardEntry
	for _, pod := range awaiting(pods, st) {
		_, reqErr := names.RequestFromPod(pod)
		a, recErr := decode(pod)
		if recordedAllocated(a, recErr, st, pod.UID) {
			continue
		}
		for _, c := range api.KubeletDemand(pod, names.WholeResourceName()) {
			if st.Allocated != nil && st.Allocated(pod.UID, c.Name) {
				continue
			}
			e := CardEntry{Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, Container: c.Name, Cards: int(c.Units)}
			switch {
			case reqErr != nil:
				e.Err = fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, reqErr)
			case recErr != nil:
				e.Err = fmt.Errorf("pod %s/%s has no gpushare assignment: pods requesting %s must be scheduled by gpushare-scheduler (%v)", pod.Namespace, pod.Name, names.WholeResourceName(), recErr)
			default:
				if w, ok := a.WholeCard(c.Name); ok {
					e.Assigned = slices.Sorted(slices.Values(w.CardUUIDs))
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// cardRecorded are the whole-card containers whose record gives them cards,
// of pods that may start containers and are admitted or recorded Allocated.
func cardRecorded(pods []*corev1.Pod, decode decodeFunc) []CardEntry {
	var out []CardEntry
	for _, pod := range pods {
		a, err := decode(pod)
		if err != nil || !api.MayStartContainers(pod) {
			continue
		}
		if a.Phase != api.PhaseAllocated && !api.Admitted(pod) {
			continue
		}
		for _, w := range a.WholeCards {
			cards := slices.Sorted(slices.Values(w.CardUUIDs))
			out = append(out, CardEntry{Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, Container: w.Name, Cards: len(cards), Assigned: cards})
		}
	}
	return out
}

// CardDecision is the container a whole-card Allocate is for.
type CardDecision struct {
	Entry CardEntry
	// Repeat: a container whose record gives it exactly these cards
	// (CardSnapshot.Recorded) is re-allocated; no record to write.
	Repeat bool
}

// MatchCards picks the container an Allocate of cards is for: a recorded
// container holding exactly these cards (a repeat); else, if none of the
// cards is held either way, the first waiting container asking for that
// many cards. A waiting container whose pod has no valid record or breaks
// the contract is refused (ErrCardsNotScheduled, with the entry: the caller
// rejects the pod).
func MatchCards(s CardSnapshot, cards Cards) (CardDecision, error) {
	for _, e := range s.Recorded {
		if slices.Equal(e.Assigned, cards) {
			return CardDecision{Entry: e, Repeat: true}, nil
		}
	}
	names := s.Names.OrDefault()
	for _, id := range cards {
		if holder, ok := s.Use.Shared[id]; ok {
			return CardDecision{}, fmt.Errorf("%w: card %s holds %s units of pod %s; it cannot be given whole (%s) until they are released", ErrCardInUse, id, names.ResourceName(), holder, names.WholeResourceName())
		}
		if holder, ok := s.Use.Whole[id]; ok {
			return CardDecision{}, fmt.Errorf("%w: card %s is already held whole by pod %s", ErrCardInUse, id, holder)
		}
	}
	for _, e := range s.Pending {
		if e.Cards != len(cards) {
			continue
		}
		if e.Err != nil {
			return CardDecision{Entry: e}, fmt.Errorf("%w: %w", ErrCardsNotScheduled, e.Err)
		}
		return CardDecision{Entry: e}, nil
	}
	return CardDecision{}, fmt.Errorf("%w: %d cards asked for (%s)", ErrNoPendingCards, len(cards), strings.Join(cards, ","))
}

// CardsExplain reports whether each size has a waiting container of its own
// asking for that many cards.
func CardsExplain(pending []CardEntry, sizes []int) bool {
	have := make([]int, len(pending))
	for i, e := range pending {
		have[i] = e.Cards
	}
	return EachSizeOnce(have, sizes)
}

// PreferredCards is the whole-card GetPreferredAllocation's answer for one
// request of size cards: the cards the extender assigned to the first
// waiting container of that size, if all are available, include
// mustInclude and are not in use; else mustInclude and then available
// cards nothing uses, in the node's order (cards: every card UUID, lowest
// index first). nil when size cards cannot be found.
func PreferredCards(pending []CardEntry, use Use, cards, available, mustInclude []string, size int) []string {
	for _, e := range pending {
		if e.Cards != size {
			continue
		}
		if e.Assigned != nil && len(e.Assigned) == size && containsAll(available, e.Assigned) && containsAll(e.Assigned, mustInclude) && !use.InUse(e.Assigned) {
			return e.Assigned
		}
		break
	}
	ids := append([]string(nil), mustInclude...)
	for _, c := range cards {
		if len(ids) >= size {
			break
		}
		if !use.InUse([]string{c}) && slices.Contains(available, c) && !slices.Contains(ids, c) {
			ids = append(ids, c)
		}
	}
	if len(ids) != size {
		return nil
	}
	return ids
}

func containsAll(set, xs []string) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}
