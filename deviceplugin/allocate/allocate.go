// Package allocate decides, without I/O, which pending container an Allocate
// call of the kubelet is for, and which units GetPreferredAllocation should
// steer the kubelet to.
//
// The kubelet's Allocate carries only device IDs, no pod. The plugin models
// the kubelet's admission queue instead (Queue): the pods bound to the node
// that request example.com/gpu-mem and are not yet admitted, oldest first
// (the kubelet admits a batch of new pods by creation time), each pod's
// containers in the order the kubelet allocates them (init containers, then
// app containers, in spec order). docs/protocol.md, "Device plugin:
// Allocate", states the algorithm and its guarantees.
package allocate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// Entry is one container in the admission queue.
type Entry struct {
	Namespace string
	Pod       string
	UID       types.UID
	Container string
	// Units is what the container requests.
	Units int64
	// Assigned is the container's assignment; nil when the pod has no valid
	// one (AssignErr says why).
	Assigned  *api.ContainerAssignment
	AssignErr error
}

// PodKey is "namespace/name".
func (e Entry) PodKey() string { return e.Namespace + "/" + e.Pod }

// State tells Queue what the plugin already knows about containers.
type State struct {
	// Allocated reports containers that already got their units (this
	// plugin's memory, or the kubelet's PodResources API).
	Allocated func(uid types.UID, container string) bool
	// Rejected reports pods whose Allocate the plugin already refused: the
	// kubelet fails the whole pod, so they are never admitted.
	Rejected func(uid types.UID) bool
	// Reopened reports pods whose Allocated record the plugin knows to be
	// stale (a guessed holding was replaced by the kubelet's truth): their
	// containers the plugin does not see holding units are pending again.
	Reopened func(uid types.UID) bool
	// KubeletAccount: Allocated covers the kubelet's own account of every
	// container it has allocated so far (PodResources, read while no
	// Allocate is in flight), besides the plugin's decisions it does not
	// contradict. An Allocated record then proves nothing (it may come from
	// a guess the kubelet contradicted, before a plugin restart): a pod is
	// pending unless Allocated shows its containers or its status shows it
	// admitted.
	KubeletAccount bool
	// Arrival is the order in which the plugin's informer first saw each
	// pod bound to the node (false: not seen yet, i.e. newer than any seen).
	// The kubelet's watch sees the same bindings in the same order and
	// admits pods as they arrive, so this breaks ties in creation time the
	// kubelet's way. nil: ties go by UID.
	Arrival func(uid types.UID) (uint64, bool)
	// Admitting reports the pods the kubelet is admitting now: it knows
	// them (its pod manager has them; it adds a pod there just before it
	// admits it), and they await admission. They come first in the queue,
	// whatever their creation time, so that the call is matched to the pod
	// the kubelet is admitting, not to the oldest pod of that size. nil:
	// the kubelet's account is not read.
	Admitting func(uid types.UID) bool
	// Keys verify each record (api.RecordKeys.Verify): a record they refuse
	// is no assignment. The zero value accepts every record.
	Keys api.RecordKeys
	// Names are the resource names and keys pods are read with (zero:
	// api.DefaultNames).
	Names api.Names
}

// Snapshot is what the matching functions decide over.
type Snapshot struct {
	// Pending is the admission queue (see Queue).
	Pending []Entry
	// Recorded are containers of admitted pods, or pods whose assignment is
	// Allocated, with a valid assignment, that st.Allocated does not show
	// holding units (e.g. after a plugin or kubelet restart). An Allocate the
	// queue does not explain is matched against them: the kubelet
	// re-allocating a container it admitted before.
	Recorded []Entry
	// Names are the names the snapshot was built with (zero:
	// api.DefaultNames), for the reasons Match gives.
	Names api.Names
}

// Build takes a snapshot of the pods bound to the node.
func Build(pods []*corev1.Pod, st State) Snapshot {
	names := st.Names.OrDefault()
	decode := memoDecode(names, st.Keys)
	return Snapshot{Pending: queue(pods, st, decode), Recorded: recorded(pods, st, decode), Names: names}
}

type decodeFunc func(*corev1.Pod) (api.Assignment, error)

// memoDecode decodes (and, with keys, verifies) each pod's assignment once
// per snapshot.
func memoDecode(names api.Names, keys api.RecordKeys) decodeFunc {
	type result struct {
		a   api.Assignment
		err error
	}
	seen := map[*corev1.Pod]result{}
	return func(p *corev1.Pod) (api.Assignment, error) {
		if r, ok := seen[p]; ok {
			return r.a, r.err
		}
		a, err := names.TrustedAssignment(p, keys)
		seen[p] = result{a, err}
		return a, err
	}
}

func recorded(pods []*corev1.Pod, st State, decode decodeFunc) []Entry {
	var out []Entry
	for _, p := range pods {
		// A pod the kubelet may still start containers of: re-allocations
		// come only for those (api.MayStartContainers).
		if !api.MayStartContainers(p) {
			continue
		}
		a, err := decode(p)
		if err != nil {
			continue
		}
		admitted := api.Admitted(p)
		reopened := st.KubeletAccount || (st.Reopened != nil && st.Reopened(p.UID))
		if !admitted && (a.Phase != api.PhaseAllocated || reopened) {
			continue
		}
		for _, c := range a.Containers {
			if st.Allocated != nil && st.Allocated(p.UID, c.Name) {
				continue
			}
			out = append(out, Entry{Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Container: c.Name, Units: c.Units, Assigned: &c})
		}
	}
	slices.SortStableFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.UID, b.UID), cmp.Compare(a.Container, b.Container))
	})
	return out
}

// queue builds the admission queue from the pods bound to the node. A pod is in it while it is
// not terminal or being deleted, has no container statuses yet (the kubelet writes them only
// after admission), its assignment is not Allocated (unless st.Reopened, or st.KubeletAccount),
// and the plugin has not rejected it. Its entries are the containers that request units and have
// not been allocated. Order: creation time, then arrival (st.Arrival), then UID; within a pod
// init containers, then app containers, in spec order.
func queue(pods []*corev1.Pod, st State, decode decodeFunc) []Entry {
	ps := awaiting(pods, st)
	var q []Entry
	for _, p := range ps {
		a, aerr := decode(p)
		if recordedAllocated(a, aerr, st, p.UID) {
			continue
		}
		cs, rerr := demand(st.Names.OrDefault(), p)
		for _, c := range cs {
			if st.Allocated != nil && st.Allocated(p.UID, c.Name) {
				continue
			}
			e := Entry{Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Container: c.Name, Units: c.Units, AssignErr: aerr}
			switch {
			case rerr != nil:
				e.AssignErr = rerr
			case aerr == nil:
				if ca, ok := a.Container(c.Name); ok {
					e.Assigned = &ca
				} else {
					e.AssignErr = fmt.Errorf("container %q has no entry in the assignment", c.Name)
				}
			}
			q = append(q, e)
		}
	}
	return q
}

// awaiting are the pods awaiting admission, in the kubelet's admission
// order: the kubelet may still start their containers
// (api.MayStartContainers) and has not started any (api.Admitted), and the
// plugin has not rejected them (st.Rejected); the pods the kubelet is
// admitting first (st.Admitting), then by creation time, then arrival
// (st.Arrival; a pod not seen yet arrived after every pod seen), then UID.
// The queues of units and of whole cards are both built from it.
func awaiting(pods []*corev1.Pod, st State) []*corev1.Pod {
	ps := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if !api.MayStartContainers(p) || api.Admitted(p) || (st.Rejected != nil && st.Rejected(p.UID)) {
			continue
		}
		ps = append(ps, p)
	}
	SortAdmission(ps, st.Admitting, st.Arrival)
	return ps
}

// SortAdmission sorts pods awaiting admission into the kubelet's admission
// order: the pods the kubelet is admitting first (admitting; nil: none
// known), then by creation time, then arrival (arrival; a pod not seen yet
// arrived after every pod seen; nil: unknown), then UID. The kubelet admits
// the pods of each batch it receives by creation time (HandlePodAdditions),
// and receives them in the order its watch sees them bound, the order the
// plugin's informer sees them too.
func SortAdmission(ps []*corev1.Pod, admitting func(types.UID) bool, arrival func(types.UID) (uint64, bool)) {
	if arrival == nil {
		arrival = func(types.UID) (uint64, bool) { return 0, false }
	}
	if admitting == nil {
		admitting = func(types.UID) bool { return false }
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ai, aj := admitting(ps[i].UID), admitting(ps[j].UID); ai != aj {
			return ai
		}
		ti, tj := ps[i].CreationTimestamp.Time, ps[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		ai, oki := arrival(ps[i].UID)
		aj, okj := arrival(ps[j].UID)
		if oki != okj {
			return oki // a pod not seen yet arrived after every pod seen
		}
		if oki && ai != aj {
			return ai < aj
		}
		return ps[i].UID < ps[j].UID
	})
}

// recordedAllocated reports whether the pod's trusted record is Allocated
// and, without the kubelet's account, to be believed (not reopened): its
// containers hold what it names, so it waits for nothing.
func recordedAllocated(a api.Assignment, err error, st State, uid types.UID) bool {
	return err == nil && a.Phase == api.PhaseAllocated && !st.KubeletAccount && (st.Reopened == nil || !st.Reopened(uid))
}

// demand is what the kubelet will ask the plugin for, container by container
// in its order. A pod that keeps the contract: api.Names.RequestFromPod, the one
// reader of a pod's demand (err nil). A pod that breaks it (an init
// container asking for gpu-mem, zero, too much; err says how) never got an
// assignment from the extender, yet the kubelet still calls Allocate for
// each container naming the resource, in its order (init containers first)
// and for the quantity rounded up (resource.Quantity.Value), so those calls
// must find the pod and be refused with the contract's reason
// (ErrPodRequest) rather than be taken for another pod's container.
func demand(names api.Names, p *corev1.Pod) ([]api.ContainerRequest, error) {
	req, err := names.RequestFromPod(p)
	if err == nil {
		return req.Containers, nil
	}
	var out []api.ContainerRequest
	for _, c := range api.KubeletDemand(p, names.ResourceName()) {
		if c.Units > 0 {
			out = append(out, c)
		}
	}
	return out, fmt.Errorf("%w: %w", api.Phrase(ErrPodRequest, "the pod's "+string(names.ResourceName())+" request breaks the gpushare contract"), err)
}

// ErrPodRequest: the container's pod asks for gpu-mem in a way the contract
// refuses (api.Names.RequestFromPod); the extender never places such a pod.
var ErrPodRequest = errors.New("the pod's GPU request breaks the gpushare contract")

// ErrNoPending: no queued container requests that many units (yet).
var ErrNoPending = errors.New("no pending container on this node requests this many units")

// ErrNotScheduled: the container's pod has no valid assignment.
var ErrNotScheduled = errors.New("pods requesting GPU memory must be scheduled by gpushare-scheduler")

// Decision is the container an Allocate call is for, and its card.
type Decision struct {
	Entry Entry
	// CardUUID is the card of the device IDs: the card the container gets.
	CardUUID string
	// Corrected: the assignment named another card; the record must be
	// corrected to CardUUID.
	Corrected bool
	// Repeat: the container was admitted before (Snapshot.Recorded); this
	// call re-allocates it on its recorded card and consumes no queue entry.
	Repeat bool
}

// MatchUnits picks the queued container an Allocate of ids (parsed at the
// door, u) is for: the first entry, in queue order, that requests len(ids) units. If that entry's pod has
// no valid assignment the call is refused (ErrNotScheduled): the kubelet then
// fails that pod and it never gets a GPU. If the entry was assigned another
// card than the ids' card (the kubelet admitted two same-size pods in another
// order than the queue), it gets the ids' card and Decision.Corrected is set.
// When no pending container requests len(ids) units, a recorded container of
// that size on the ids' card is taken as re-allocated (Decision.Repeat).
func MatchUnits(s Snapshot, u Units) (Decision, error) {
	card, size := u.Card, u.Size()
	notScheduled := api.Phrase(ErrNotScheduled, "pods requesting "+string(s.Names.OrDefault().ResourceName())+" must be scheduled by gpushare-scheduler")
	for _, e := range s.Pending {
		if e.Units != size {
			continue
		}
		if errors.Is(e.AssignErr, ErrPodRequest) {
			return Decision{Entry: e}, fmt.Errorf("pod %s: %w", e.PodKey(), e.AssignErr)
		}
		if e.Assigned == nil && (errors.Is(e.AssignErr, api.ErrUnsigned) || errors.Is(e.AssignErr, api.ErrBadSignature)) {
			return Decision{Entry: e}, fmt.Errorf("pod %s: its gpushare assignment record is not trusted, so it gets no GPU: %w (%w)", e.PodKey(), e.AssignErr, notScheduled)
		}
		if e.Assigned == nil {
			return Decision{Entry: e}, fmt.Errorf("pod %s has no gpushare assignment: %w (%v)", e.PodKey(), notScheduled, e.AssignErr)
		}
		return Decision{Entry: e, CardUUID: card, Corrected: e.Assigned.CardUUID != card}, nil
	}
	for _, e := range s.Recorded {
		if e.Units == size && e.Assigned.CardUUID == card {
			return Decision{Entry: e, CardUUID: card, Repeat: true}, nil
		}
	}
	return Decision{}, fmt.Errorf("%w: %d units", ErrNoPending, size)
}

// Explains reports whether the snapshot has, for each size, a container
// requesting that many units that Decide could match: one queued, or one
// recorded (a re-allocation). Each container explains one size. With none,
// a preference or a decision for that size would be made without the pod it
// is for.
func Explains(s Snapshot, sizes []int) bool {
	have := make([]int, 0, len(s.Pending)+len(s.Recorded))
	for _, e := range append(slices.Clip(s.Pending), s.Recorded...) {
		have = append(have, int(e.Units))
	}
	return EachSizeOnce(have, sizes)
}

// EachSizeOnce reports whether every size in want can be paired with an
// equal size in have, each of have used at most once.
func EachSizeOnce(have, want []int) bool {
	left := map[int]int{}
	for _, h := range have {
		left[h]++
	}
	for _, w := range want {
		if left[w] == 0 {
			return false
		}
		left[w]--
	}
	return true
}

// Preferred returns the units GetPreferredAllocation offers for a request of
// size units: size available units of ONE card, never units of two cards.
//
// With mustInclude, the rest comes from mustInclude's card. Otherwise the
// card is that of the first queued container requesting size units, if it has
// room (with no such container: the first recorded container of that size
// whose card has room, so that a re-allocation returns to its card); else the
// fullest card that still has room (best fit). Lowest unit numbers first.
// A unit offered (or must-included) twice counts once. nil when no single
// card has size available units, or mustInclude names more than size units.
func Preferred(s Snapshot, available, mustInclude []string, size int) []string {
	if size <= 0 {
		return nil
	}
	byCard := map[string][]string{}
	var order []string
	offered := make(map[string]bool, len(available))
	for _, id := range available {
		c, _, err := api.ParseUnitID(id)
		if err != nil || offered[id] {
			continue // not a unit, or offered twice: a unit counts once
		}
		offered[id] = true
		if _, ok := byCard[c]; !ok {
			order = append(order, c)
		}
		byCard[c] = append(byCard[c], id)
	}
	for _, ids := range byCard {
		sort.Slice(ids, func(i, j int) bool { return unitNumber(ids[i]) < unitNumber(ids[j]) })
	}
	take := func(card string, pre []string) []string {
		var out []string
		have := map[string]bool{}
		for _, id := range pre {
			if !have[id] {
				out = append(out, id)
			}
			have[id] = true
		}
		if len(out) > size {
			return nil // more must-include units than the request: no preference fits
		}
		for _, id := range byCard[card] {
			if len(out) >= size {
				break
			}
			if !have[id] {
				out = append(out, id)
			}
		}
		if len(out) < size {
			return nil
		}
		return out
	}
	if len(mustInclude) > 0 {
		card, err := CardOf(mustInclude)
		if err != nil {
			return nil
		}
		return take(card, mustInclude)
	}
	head := false
	for _, e := range s.Pending {
		if e.Units != int64(size) {
			continue
		}
		if e.Assigned != nil && len(byCard[e.Assigned.CardUUID]) >= size {
			return take(e.Assigned.CardUUID, nil)
		}
		head = true
		break
	}
	if !head {
		for _, e := range s.Recorded {
			if e.Units == int64(size) && len(byCard[e.Assigned.CardUUID]) >= size {
				return take(e.Assigned.CardUUID, nil)
			}
		}
	}
	best := ""
	for _, c := range order {
		n := len(byCard[c])
		if n < size {
			continue
		}
		if best == "" || n < len(byCard[best]) || (n == len(byCard[best]) && c < best) {
			best = c
		}
	}
	if best == "" {
		return nil
	}
	return take(best, nil)
}

func unitNumber(id string) int64 {
	_, n, err := api.ParseUnitID(id)
	if err != nil {
		return -1
	}
	return n
}
