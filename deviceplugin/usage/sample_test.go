package usage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

func TestSweepAttributesEveryProcess(t *testing.T) {
	n := newNode(t, 2)
	a := n.pod("a", "train")
	b := n.pod("b", "serve", "sidecar")
	c := n.pod("c", "nogrant")
	n.grant(a, "train", 0, 10)
	n.grant(b, "serve", 0, 20)
	n.run(101, a, 0, 0, 4*gib) // within its 10 GiB
	n.run(102, a, 0, 0, 8*gib) // a second process of the same container: 12 GiB in all
	n.run(201, b, 0, 0, 5*gib) // within its 20 GiB
	n.run(202, b, 1, 0, 1*gib) // b's sidecar has no grant of its own
	n.run(203, b, 0, 1, 2*gib) // b's container on a card it holds nothing of
	n.run(301, c, 0, 0, 3*gib) // a pod without any grant
	n.run(401, nil, 0, 0, gib) // a host process
	n.nvmlOnly(501, 1, gib/2)  // exited before its cgroup was read

	got := n.sweep()
	want := Sample{
		Time: t0,
		Cards: []CardSample{
			{UUID: "GPU-0", Index: 0, TotalBytes: 80 * gib, UsedBytes: 22 * gib, UnaccountedBytes: 5 * gib},
			{UUID: "GPU-1", Index: 1, TotalBytes: 80 * gib, UsedBytes: 2*gib + gib/2, UnaccountedBytes: 2*gib + gib/2},
		},
		Usages: []Usage{
			{Card: "GPU-0", Ref: Ref{}, UsedBytes: gib, PIDs: []uint32{401}},
			{Card: "GPU-0", Ref: ref(a, "train"), Grant: true, GrantedBytes: 10 * gib, UsedBytes: 12 * gib, PIDs: []uint32{101, 102}},
			{Card: "GPU-0", Ref: ref(b, "serve"), Grant: true, GrantedBytes: 20 * gib, UsedBytes: 5 * gib, PIDs: []uint32{201}},
			{Card: "GPU-0", Ref: ref(b, "sidecar"), UsedBytes: gib, PIDs: []uint32{202}},
			{Card: "GPU-0", Ref: ref(c, "nogrant"), UsedBytes: 3 * gib, PIDs: []uint32{301}},
			{Card: "GPU-1", Ref: Ref{}, UsedBytes: gib / 2, PIDs: []uint32{501}},
			{Card: "GPU-1", Ref: ref(b, "serve"), UsedBytes: 2 * gib, PIDs: []uint32{203}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("sample (-want +got):\n%s", d)
	}
}

func TestSweepReportsGrantsWithoutProcessesAndCardsNVMLCannotList(t *testing.T) {
	n := newNode(t, 2)
	a := n.pod("a", "idle")
	b := n.pod("b", "busy")
	n.grant(a, "idle", 0, 4)
	n.grant(b, "busy", 1, 4)
	n.run(7, b, 0, 1, gib)
	n.nv.fail["GPU-1"] = true
	got := n.sweep()
	if len(got.Cards) != 2 || got.Cards[1].Err == nil || got.Cards[0].Err != nil {
		t.Fatalf("cards = %+v, want GPU-1 failed and GPU-0 sampled", got.Cards)
	}
	want := []Usage{{Card: "GPU-0", Ref: ref(a, "idle"), Grant: true, GrantedBytes: 4 * gib}}
	if d := cmp.Diff(want, got.Usages); d != "" {
		t.Errorf("usages (-want +got):\n%s", d)
	}
}

func TestSweepWithoutPodResourcesReadsAssignmentRecords(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "train")
	rec := api.Assignment{Version: api.AssignmentVersion, PodUID: a.UID, Node: "node-a", Unit: api.UnitGiB, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: "train", CardUUID: "GPU-0", Units: 6}}}
	s, err := api.EncodeAssignment(rec)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	a.Spec.NodeName = "node-a"
	a.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(6, resource.DecimalSI)}
	done := n.pod("done", "x")
	done.Status.Phase = corev1.PodSucceeded
	done.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s} // wrong UID anyway: never believed
	n.run(9, a, 0, 0, 7*gib)
	sm := n.sampler()
	sm.PodResources = nil
	got, err := sm.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{{Card: "GPU-0", Ref: ref(a, "train"), Grant: true, GrantedBytes: 6 * gib, UsedBytes: 7 * gib, PIDs: []uint32{9}}}
	if d := cmp.Diff(want, got.Usages, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("usages (-want +got):\n%s", d)
	}
}

// A record written in another unit (the node's --memory-unit changed
// since) is granted what it holds, rounded up to whole units
// (api.ConvertUnitsUp): a container is never measured against less than it
// was given.
func TestSweepGrantsARecordInAnotherUnitRoundedUp(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "train")
	rec := api.Assignment{Version: api.AssignmentVersion, PodUID: a.UID, Node: "node-a", Unit: api.UnitMiB, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: "train", CardUUID: "GPU-0", Units: 1536}}}
	s, err := api.EncodeAssignment(rec)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	a.Spec.NodeName = "node-a"
	a.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(1536, resource.DecimalSI)}
	sm := n.sampler()
	sm.PodResources, sm.Unit = nil, api.UnitGiB
	got, err := sm.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{{Card: "GPU-0", Ref: ref(a, "train"), Grant: true, GrantedBytes: 2 * gib}}
	if d := cmp.Diff(want, got.Usages, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("usages (-want +got):\n%s", d)
	}
}

func TestSweepUnknownMemoryCountsZero(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "c")
	n.grant(a, "c", 0, 1)
	n.run(5, a, 0, 0, 0)
	n.nv.procs["GPU-0"] = []nvml.Process{{PID: 5}}
	got := n.sweep()
	if got.Usages[0].UsedBytes != 0 || len(got.Usages[0].PIDs) != 1 {
		t.Errorf("usage = %+v, want the PID listed with 0 bytes", got.Usages[0])
	}
}

func TestSweepReadsAReusedPIDAgain(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "c")
	b := n.pod("b", "c")
	n.grant(a, "c", 0, 1)
	n.grant(b, "c", 0, 1)
	n.run(5, a, 0, 0, gib)
	s := n.sampler()
	sweep := func() Sample {
		out, err := s.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	owner := func(out Sample) string {
		for _, u := range out.Usages {
			if len(u.PIDs) > 0 {
				return u.Ref.Pod
			}
		}
		return ""
	}
	if got := owner(sweep()); got != "a" {
		t.Fatalf("PID 5 belongs to %q, want a", got)
	}
	// PID 5 exits (off NVML's list), and a process of pod b gets PID 5.
	n.nv.procs["GPU-0"] = nil
	sweep()
	n.run(5, b, 0, 0, gib)
	if got := owner(sweep()); got != "b" {
		t.Errorf("reused PID 5 belongs to %q, want b (the cached owner must be dropped once NVML stops listing the PID)", got)
	}
}

type failingPodResources struct{}

func (failingPodResources) Get(context.Context, []*corev1.Pod) ([]podresources.Holding, error) {
	return nil, errors.New("connection refused")
}

func TestSweepFallsBackToRecordsWhenPodResourcesFail(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "train")
	rec := api.Assignment{Version: api.AssignmentVersion, PodUID: a.UID, Node: "node-a", Unit: api.UnitGiB, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: "train", CardUUID: "GPU-0", Units: 6}}}
	s, err := api.EncodeAssignment(rec)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	a.Spec.NodeName = "node-a"
	a.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(6, resource.DecimalSI)}
	sm := n.sampler()
	sm.PodResources = failingPodResources{}
	got, err := sm.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.PodResourcesErr == nil {
		t.Error("PodResourcesErr not set")
	}
	if len(got.Usages) != 1 || !got.Usages[0].Grant || got.Usages[0].GrantedBytes != 6*gib {
		t.Errorf("usages = %+v, want the record's 6 GiB grant", got.Usages)
	}
}

// A container given cards whole is granted all of each card's memory: using
// the whole card is not over its grant.
func TestSweepGrantsWholeCardsTheirMemory(t *testing.T) {
	n := newNode(t, 2)
	w := n.pod("w", "train")
	w.Spec.NodeName = "n"
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: w.UID, Node: "n", Unit: api.UnitGiB, Phase: api.PhaseAllocated,
		WholeCards: []api.WholeCardAssignment{{Name: "train", CardUUIDs: []string{"GPU-1"}, CardIndexes: []int{1}}}}
	w.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultNames().WholeResourceName(): resource.MustParse("1")}
	s, err := api.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	w.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
	n.run(101, w, 0, 1, 80*gib)
	got := n.sweep()
	want := []Usage{{Card: "GPU-1", Ref: ref(w, "train"), Grant: true, GrantedBytes: 80 * gib, UsedBytes: 80 * gib, PIDs: []uint32{101}}}
	if d := cmp.Diff(want, got.Usages); d != "" {
		t.Errorf("usages (-want +got):\n%s", d)
	}
}

// keyRing is a fixed api.RecordKeyring.
type keyRing api.RecordKeys

func (k keyRing) Keys() api.RecordKeys { return api.RecordKeys(k) }

// With record keys, a record the keys do not verify grants nothing: a forged
// record cannot raise a container's grant above what the extender signed.
func TestSweepReadsOnlyTrustedRecordsWithRecordKeys(t *testing.T) {
	keys := podtest.RecordKeys("sampler-record-key-0123456789abcdef")
	n := newNode(t, 1)
	record := func(p *corev1.Pod, sign bool) {
		rec := api.Assignment{Version: api.AssignmentVersion, PodUID: p.UID, Node: "node-a", Unit: api.UnitGiB, Phase: api.PhaseAllocated,
			Containers: []api.ContainerAssignment{{Name: "train", CardUUID: "GPU-0", Units: 6}}}
		if sign {
			var err error
			if rec, err = keys.Sign(rec); err != nil {
				t.Fatal(err)
			}
		}
		s, err := api.EncodeAssignment(rec)
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): s}
		p.Spec.NodeName = "node-a"
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(6, resource.DecimalSI)}
	}
	signed, forged := n.pod("signed", "train"), n.pod("forged", "train")
	record(signed, true)
	record(forged, false)
	n.run(9, signed, 0, 0, 5*gib)
	n.run(10, forged, 0, 0, 5*gib)
	sm := n.sampler()
	sm.PodResources = nil
	sm.Keys = keyRing(keys)
	got, err := sm.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	grants := map[string]bool{}
	for _, u := range got.Usages {
		grants[u.Ref.Pod] = u.Grant
	}
	if diff := cmp.Diff(map[string]bool{"signed": true, "forged": false}, grants); diff != "" {
		t.Errorf("grants by pod (-want +got):\n%s", diff)
	}
}

// A node served by DRA: the claims' grants measure their containers as
// units do, a container given memory both ways is granted the sum, and a
// claim that cannot be read skips the sweep instead of taking its
// containers for ones without a grant.
func TestSweepMeasuresContainersAgainstTheirClaims(t *testing.T) {
	n := newNode(t, 2)
	a := n.pod("a", "train")
	b := n.pod("b", "serve")
	n.grant(b, "serve", 1, 2)
	n.run(101, a, 0, 0, 12*gib)
	n.run(201, b, 0, 1, 5*gib)
	s := n.sampler()
	claims := []Grant{
		{Namespace: a.Namespace, Pod: a.Name, Container: "train", Card: "GPU-0", Bytes: 10 * gib},
		{Namespace: b.Namespace, Pod: b.Name, Container: "serve", Card: "GPU-1", Bytes: 4 * gib},
	}
	var claimsErr error
	s.Claims = func(context.Context, []*corev1.Pod) ([]Grant, error) { return claims, claimsErr }
	got, err := s.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{
		{Card: "GPU-0", Ref: ref(a, "train"), Grant: true, GrantedBytes: 10 * gib, UsedBytes: 12 * gib, PIDs: []uint32{101}},
		{Card: "GPU-1", Ref: ref(b, "serve"), Grant: true, GrantedBytes: 6 * gib, UsedBytes: 5 * gib, PIDs: []uint32{201}},
	}
	if d := cmp.Diff(want, got.Usages); d != "" {
		t.Errorf("usages (-want +got):\n%s", d)
	}
	if got.Cards[0].UnaccountedBytes != 0 || got.Cards[1].UnaccountedBytes != 0 {
		t.Errorf("cards %+v: nothing is unaccounted", got.Cards)
	}
	claimsErr = errors.New("forbidden")
	if _, err := s.Sweep(context.Background()); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("sweep with unreadable claims: %v, want the error", err)
	}
}

// Containers naming one claim share its memory: two containers of a 10 GiB
// claim using 6 GiB each use 12 GiB of it, and both are due; a container
// with its own claim on the card is measured alone.
func TestContainersSharingAClaimAreMeasuredTogether(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "main", "side")
	b := n.pod("b", "solo")
	n.run(100, a, 0, 0, 6*gib)
	n.run(101, a, 1, 0, 6*gib)
	n.run(200, b, 0, 0, 6*gib)
	s := n.sampler()
	s.Claims = func(context.Context, []*corev1.Pod) ([]Grant, error) {
		return []Grant{
			{Namespace: "ns", Pod: "a", Container: "main", Card: "GPU-0", Bytes: 10 * gib, Share: "claim-a/gpu/card-0"},
			{Namespace: "ns", Pod: "a", Container: "side", Card: "GPU-0", Bytes: 10 * gib, Share: "claim-a/gpu/card-0"},
			{Namespace: "ns", Pod: "b", Container: "solo", Card: "GPU-0", Bytes: 10 * gib, Share: "claim-b/gpu/card-0"},
		}, nil
	}
	sample, err := s.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, due := Decide(nil, sample, Policy{Tolerance: Tolerance{Percent: 5}})
	var got []string
	for _, v := range due {
		got = append(got, v.Usage.Ref.String())
	}
	if d := cmp.Diff([]string{"ns/a/main", "ns/a/side"}, got); d != "" {
		t.Errorf("due (-want +got):\n%s", d)
	}
	for _, u := range sample.Usages {
		if u.Ref.Pod == "a" && (u.Shared == nil || u.Shared.GrantedBytes != 10*gib || u.Shared.UsedBytes != 12*gib || len(u.Shared.Containers) != 2) {
			t.Errorf("%s shared %+v, want 12 GiB used of 10 GiB by two containers", u.Ref, u.Shared)
		}
		if u.Ref.Pod == "b" && u.Shared != nil {
			t.Errorf("solo measured with others: %+v", u.Shared)
		}
	}
}
