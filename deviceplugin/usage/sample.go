// Package usage owns the device plugin's view of GPU memory in use: it
// samples, per card, the processes NVML reports, maps each to its pod and
// container through /proc/<pid>/cgroup and the kubelet's PodResources, and
// measures every container against the memory it was granted (Sample). The
// decision of who is over its grant for too long is a pure function over
// samples (Decide); the Enforcer acts on it (an Event, an Eviction or
// SIGKILL, per --memory-enforcement), and Metrics exports the samples to
// Prometheus.
package usage

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
)

// Ref names a container of a pod. A zero Ref is "no pod": a process on the
// host, or one whose cgroup names no pod.
type Ref struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
}

// InPod reports whether the Ref names a pod.
func (r Ref) InPod() bool { return r.UID != "" }

func (r Ref) String() string {
	if !r.InPod() {
		return "(no pod)"
	}
	if r.Pod == "" {
		return "pod UID " + string(r.UID)
	}
	return r.Namespace + "/" + r.Pod + "/" + r.Container
}

// Usage is one container's memory on one card. A container holding units
// of the card has Grant true and GrantedBytes > 0. Any other process on the
// card is unaccounted: Grant false, grouped by container (Ref), or under a
// zero Ref for processes in no pod.
type Usage struct {
	Card         string
	Ref          Ref
	Grant        bool
	GrantedBytes int64
	UsedBytes    int64
	// PIDs are the container's processes on the card, ascending.
	PIDs []uint32
	// TerminationGrace is the pod's terminationGracePeriodSeconds (nil: the
	// pod sets none, or the pod cache does not know it).
	TerminationGrace *int64
	// Shared is set when part of the grant is memory other containers were
	// granted too (containers naming one ResourceClaim): Decide measures
	// them together, by Shared's figures.
	Shared *Shared
}

// Shared is the grant and use of the containers on one card that share
// granted memory (directly, or through a container they each share with):
// each share counted once, each container's use once. Two containers
// naming one 10 GiB claim, using 6 GiB each, use 12 GiB of 10 GiB.
type Shared struct {
	Containers   []Ref
	GrantedBytes int64
	UsedBytes    int64
}

// Measured is what Decide holds the container to: its own grant and use,
// or its share group's (Shared).
func (u Usage) Measured() (granted, used int64) {
	if u.Shared != nil {
		return u.Shared.GrantedBytes, u.Shared.UsedBytes
	}
	return u.GrantedBytes, u.UsedBytes
}

// CardSample is one card's totals.
type CardSample struct {
	UUID  string
	Index int
	// TotalBytes is the card's memory; UsedBytes the sum of what NVML
	// reports for the processes on it (NVML's card-level "used" also counts
	// the driver's own reservation); UnaccountedBytes the part of UsedBytes
	// held by processes without a grant on the card.
	TotalBytes, UsedBytes, UnaccountedBytes int64
	// Err is set when NVML could not list the card's processes this sweep;
	// the card's containers then have no usage figures.
	Err error
}

// Sample is one sweep over the node's cards.
type Sample struct {
	Time   time.Time
	Cards  []CardSample
	Usages []Usage
	// PodResourcesErr is set when the kubelet's PodResources could not be
	// read: the grants then come from the pods' assignment records.
	PodResourcesErr error
}

// Processes is what the sampler needs from NVML.
type Processes interface {
	Processes(uuid string) ([]nvml.Process, error)
}

// Sampler takes samples. Every field is required except PodResources: without
// it the grants are read from the pods' assignment records (api.Assignment),
// which the plugin keeps equal to what the kubelet allocated.
type Sampler struct {
	NVML Processes
	// Cards lists the node's cards (the inventory store's Cards).
	Cards func() []nvml.Card
	// Unit is the unit of the grants (--memory-unit).
	Unit api.MemoryUnit
	// Names are the keys records are read from (zero: api.DefaultNames).
	Names api.Names
	// Keys, when set, are the record keys in force: grants are read only
	// from records they trust (api.Names.TrustedAssignment), as the plugin
	// reads them. nil: every record.
	Keys api.RecordKeyring
	// Proc is the host's /proc ("/proc" when the plugin runs with hostPID).
	Proc string
	// Pods lists the pods bound to the node (the plugin's informer cache).
	Pods         func() ([]*corev1.Pod, error)
	PodResources podresources.Reader
	// Claims, when set, are the grants of containers given memory through
	// ResourceClaims (a node served by DRA: deviceplugin/dra.ClaimGrants).
	Claims func(ctx context.Context, pods []*corev1.Pod) ([]Grant, error)
	Clock  func() time.Time

	// owners caches each PID's cgroup owner from one sweep to the next, for
	// the PIDs still on a card: a process does not change pod, and a PID is
	// only reused after its process exited, which takes it off NVML's lists
	// (the entry is dropped at the first sweep that does not list it: a PID
	// would have to exit and be reused by a new GPU process within one
	// interval to be misattributed, and Kill reads the cgroup again before
	// it signals). A sweep then costs one /proc read per new process.
	owners map[uint32]Owner
	buf    []byte
}

// Grant is memory a container was given on a card other than in units of
// the device plugin's resource: through a ResourceClaim.
type Grant struct {
	Namespace, Pod, Container string
	// Card is the card's UUID.
	Card  string
	Bytes int64
	// Share names the memory granted (a claim's allocation result): the
	// containers granted one share use it together and are measured
	// together (Usage.Shared). Empty: the container's own.
	Share string
}

type grantKey struct {
	namespace, pod, container, card string
}

// Sweep takes one sample; one sweep at a time (the Loop's goroutine). It
// fails only when the pod cache or the claims' grants (Claims) cannot be read. A card NVML cannot list is
// marked in its CardSample and the others are sampled; PodResources that
// cannot be read are reported in Sample.PodResourcesErr (grants from the
// assignment records).
func (s *Sampler) Sweep(ctx context.Context) (Sample, error) {
	pods, err := s.Pods()
	if err != nil {
		return Sample{}, fmt.Errorf("listing the node's pods: %w", err)
	}
	grants, prErr := s.grants(ctx, pods)
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	byName := make(map[[2]string]*corev1.Pod, len(pods))
	for _, p := range pods {
		byUID[p.UID] = p
		byName[[2]string{p.Namespace, p.Name}] = p
	}
	// refOf is the container's Ref, with its pod's UID when the pod is known.
	refOf := func(namespace, pod, container string) Ref {
		ref := Ref{Namespace: namespace, Pod: pod, Container: container}
		if p := byName[[2]string{namespace, pod}]; p != nil {
			ref.UID = p.UID
		}
		return ref
	}
	out := Sample{Time: s.Clock(), PodResourcesErr: prErr}
	usages := map[usageKey]*Usage{}
	// Every grant is reported, used or not.
	for k, units := range grants {
		ref := refOf(k.namespace, k.pod, k.container)
		usages[usageKey{k.card, ref}] = &Usage{Card: k.card, Ref: ref, Grant: true, GrantedBytes: units * s.Unit.MiB() << 20}
	}
	// A container given cards whole (api.Names.WholeResourceName) is granted all
	// of each card's memory.
	if whole := wholeFromRecords(s.Names.OrDefault(), api.KeysOf(s.Keys), pods); len(whole) > 0 {
		mem := map[string]int64{}
		for _, c := range s.Cards() {
			mem[c.UUID] = c.MemoryMiB << 20
		}
		for k := range whole {
			ref := refOf(k.namespace, k.pod, k.container)
			usages[usageKey{k.card, ref}] = &Usage{Card: k.card, Ref: ref, Grant: true, GrantedBytes: mem[k.card]}
		}
	}
	shares := map[usageKey]map[string]int64{} // the Grant.Share each grant comes from, by bytes
	if s.Claims != nil {
		claimed, err := s.Claims(ctx, pods)
		if err != nil {
			return Sample{}, fmt.Errorf("reading the grants of the node's claims: %w", err)
		}
		for _, g := range claimed {
			ref := refOf(g.Namespace, g.Pod, g.Container)
			k := usageKey{g.Card, ref}
			u, ok := usages[k]
			if !ok {
				u = &Usage{Card: g.Card, Ref: ref, Grant: true}
				usages[k] = u
			}
			u.GrantedBytes += g.Bytes
			if g.Share != "" {
				if shares[k] == nil {
					shares[k] = map[string]int64{}
				}
				shares[k][g.Share] += g.Bytes
			}
		}
	}
	if s.buf == nil {
		s.buf = make([]byte, 4096)
	}
	owners := make(map[uint32]Owner, len(s.owners)) // this sweep's PIDs
	for _, c := range s.Cards() {
		cs := CardSample{UUID: c.UUID, Index: c.Index, TotalBytes: c.MemoryMiB << 20}
		procs, err := s.NVML.Processes(c.UUID)
		if err != nil {
			cs.Err = err
			out.Cards = append(out.Cards, cs)
			continue
		}
		for _, pr := range procs {
			o, seen := owners[pr.PID] // on another card this sweep
			if !seen {
				if o, seen = s.owners[pr.PID]; !seen {
					// Exited or unreadable: counted, unattributed (and
					// cached: a PID whose /proc entry is missing while NVML
					// lists it stays unattributed).
					o, _ = ownerOf(s.Proc, pr.PID, s.buf)
				}
				owners[pr.PID] = o
			}
			ref := resolve(o, byUID)
			used := int64(pr.UsedBytes)
			cs.UsedBytes += used
			k := usageKey{c.UUID, ref}
			u, ok := usages[k]
			if !ok || !u.Grant {
				if !ok {
					u = &Usage{Card: c.UUID, Ref: ref}
					usages[k] = u
				}
				cs.UnaccountedBytes += used
			}
			u.UsedBytes += used
			u.PIDs = append(u.PIDs, pr.PID)
		}
		out.Cards = append(out.Cards, cs)
	}
	s.owners = owners
	groupShares(usages, shares)
	failed := out.failedCards()
	for _, u := range usages {
		if failed[u.Card] {
			continue
		}
		sort.Slice(u.PIDs, func(a, b int) bool { return u.PIDs[a] < u.PIDs[b] })
		if p := byUID[u.Ref.UID]; p != nil {
			u.TerminationGrace = p.Spec.TerminationGracePeriodSeconds
		}
		out.Usages = append(out.Usages, *u)
	}
	sort.Slice(out.Usages, func(a, b int) bool { return out.Usages[a].less(out.Usages[b]) })
	return out, nil
}

type usageKey struct {
	card string
	ref  Ref
}

// less orders usages by card, then namespace, pod, pod UID and container.
func (u Usage) less(v Usage) bool {
	a, b := u.Ref, v.Ref
	return cmp.Or(
		cmp.Compare(u.Card, v.Card),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Pod, b.Pod),
		cmp.Compare(a.UID, b.UID),
		cmp.Compare(a.Container, b.Container),
	) < 0
}

// failedCards are the UUIDs of the cards NVML could not list this sweep.
func (s Sample) failedCards() map[string]bool {
	failed := map[string]bool{}
	for _, c := range s.Cards {
		if c.Err != nil {
			failed[c.UUID] = true
		}
	}
	return failed
}

// resolve names the owner's pod and container from the pod cache: the
// container whose status carries the cgroup's container ID (app, init or
// ephemeral). A pod the cache does not know keeps only its UID; a container
// ID no status carries (a container just started or restarted) keeps the
// pod and an empty container name.
func resolve(o Owner, byUID map[types.UID]*corev1.Pod) Ref {
	if !o.InPod() {
		return Ref{}
	}
	p := byUID[o.PodUID]
	if p == nil {
		return Ref{UID: o.PodUID}
	}
	ref := Ref{Namespace: p.Namespace, Pod: p.Name, UID: p.UID}
	if o.ContainerID == "" {
		return ref
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if trimScheme(cs.ContainerID) == o.ContainerID {
				ref.Container = cs.Name
				return ref
			}
		}
	}
	return ref
}

// trimScheme turns "containerd://3f5e…" (or cri-o://, docker://) into "3f5e…".
func trimScheme(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		return id[i+3:]
	}
	return id
}

// grants is units per container and card: the kubelet's PodResources when
// configured (the devices it gave each container, api.UnitID per unit),
// otherwise, or when PodResources cannot be read (the error is returned
// with the grants), the pods' assignment records, which the plugin keeps
// equal to what the kubelet allocated.
func (s *Sampler) grants(ctx context.Context, pods []*corev1.Pod) (map[grantKey]int64, error) {
	out := map[grantKey]int64{}
	if s.PodResources != nil {
		hs, err := s.PodResources.Get(ctx, pods)
		if err != nil {
			return fromRecords(s.Names.OrDefault(), api.KeysOf(s.Keys), pods, s.Unit), fmt.Errorf("reading the kubelet's PodResources: %w", err)
		}
		for _, h := range hs {
			for _, id := range h.IDs {
				card, _, err := api.ParseUnitID(id)
				if err != nil {
					continue // not ours; the plugin reports malformed IDs at Allocate
				}
				out[grantKey{h.Namespace, h.Pod, h.Container, card}]++
			}
		}
		return out, nil
	}
	return fromRecords(s.Names.OrDefault(), api.KeysOf(s.Keys), pods, s.Unit), nil
}

// wholeFromRecords are the containers given cards whole, by card, from the
// pods' records (Allocated, or of a pod that runs): the device plugin keeps
// them equal to what the kubelet allocated (docs/protocol.md, "Whole cards").
func wholeFromRecords(names api.Names, keys api.RecordKeys, pods []*corev1.Pod) map[grantKey]bool {
	out := map[grantKey]bool{}
	for _, p := range pods {
		a, err := names.TrustedAssignment(p, keys)
		// A running pod's whole cards are its own, whatever phase its
		// record shows (whole cards have no PreStartContainer).
		if err != nil || !api.RecordHolds(p, a) && !(api.HoldsUnits(p) && p.Status.Phase == corev1.PodRunning) {
			continue
		}
		for _, w := range a.WholeCards {
			for _, card := range w.CardUUIDs {
				out[grantKey{p.Namespace, p.Name, w.Name, card}] = true
			}
		}
	}
	return out
}

func fromRecords(names api.Names, keys api.RecordKeys, pods []*corev1.Pod, unit api.MemoryUnit) map[grantKey]int64 {
	out := map[grantKey]int64{}
	for _, p := range pods {
		a, err := names.TrustedAssignment(p, keys)
		if err != nil || !api.RecordHolds(p, a) {
			continue
		}
		for _, c := range a.Containers {
			out[grantKey{p.Namespace, p.Name, c.Name, c.CardUUID}] += api.ConvertUnitsUp(c.Units, a.Unit, unit)
		}
	}
	return out
}
