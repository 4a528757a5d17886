package dra

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/deviceplugin/usage"
)

const gib = int64(1) << 30

// allocated is a claim allocated results, reserved for the pods.
func allocated(ns, name string, results []resourceapi.DeviceRequestAllocationResult, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("claim-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

func allocResult(driver, pool, request, device, memory string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Driver: driver, Pool: pool, Request: request, Device: device}
	if memory != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: resource.MustParse(memory)}
	}
	return r
}

// claimsPod has containers naming pod-level claims (name or name/request).
func claimsPod(name string, podClaims []corev1.PodResourceClaim, containers map[string][]corev1.ResourceClaim) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID("uid-" + name)}}
	p.Spec.NodeName = "node-a"
	p.Spec.ResourceClaims = podClaims
	for _, c := range []string{"init", "main", "side"} {
		if refs, ok := containers[c]; ok {
			ctr := corev1.Container{Name: c, Resources: corev1.ResourceRequirements{Claims: refs}}
			if c == "init" {
				p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
			} else {
				p.Spec.Containers = append(p.Spec.Containers, ctr)
			}
		}
	}
	p.Status.Phase = corev1.PodRunning
	return p
}

func TestClaimGrantsGiveEachContainerWhatItsClaimsConsumed(t *testing.T) {
	s := store(t)
	driver := "gpushare.example.com"
	// "train" names the claim "shared" (created by hand) and a claim from
	// a template; its sidecar names only the template claim's request
	// "small"; the init container names nothing.
	pod := claimsPod("train", []corev1.PodResourceClaim{
		{Name: "shared", ResourceClaimName: ptr.To("shared")},
		{Name: "tmpl", ResourceClaimTemplateName: ptr.To("gpu-template")},
	}, map[string][]corev1.ResourceClaim{
		"init": nil,
		"main": {{Name: "shared"}, {Name: "tmpl"}},
		"side": {{Name: "tmpl", Request: "small"}},
	})
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "tmpl", ResourceClaimName: ptr.To("train-tmpl-x7k2")}}
	other := claimsPod("other", []corev1.PodResourceClaim{{Name: "mine", ResourceClaimName: ptr.To("mine")}},
		map[string][]corev1.ResourceClaim{"main": {{Name: "mine"}}})
	waiting := claimsPod("waiting", []corev1.PodResourceClaim{{Name: "late", ResourceClaimName: ptr.To("late")}},
		map[string][]corev1.ResourceClaim{"main": {{Name: "late"}}})
	claims := map[string]*resourceapi.ResourceClaim{
		"shared": allocated("team", "shared", []resourceapi.DeviceRequestAllocationResult{
			allocResult(driver, "node-a", "gpu", "card-0", "10Gi"),
			allocResult("gpu.nvidia.com", "node-a", "gpu", "gpu-0", ""), // another driver's
			allocResult(driver, "node-b", "gpu", "card-1", "5Gi"),       // another node's pool
		}, pod),
		"train-tmpl-x7k2": allocated("team", "train-tmpl-x7k2", []resourceapi.DeviceRequestAllocationResult{
			allocResult(driver, "node-a", "small", "card-2", "3Gi"),
			allocResult(driver, "node-a", "big", "card-2", "20Gi"),
			allocResult(driver, "node-a", "whole", "card-1", ""),   // no consumed memory: the whole card
			allocResult(driver, "node-a", "gone", "card-7", "1Gi"), // no such card
		}, pod),
		"mine": allocated("team", "mine", []resourceapi.DeviceRequestAllocationResult{allocResult(driver, "node-a", "gpu", "card-0", "4Gi")}, other),
		// Allocated, but reserved for another pod: no grant yet.
		"late": allocated("team", "late", []resourceapi.DeviceRequestAllocationResult{allocResult(driver, "node-a", "gpu", "card-1", "8Gi")}, other),
	}
	gets := map[string]int{}
	fail := false
	g := &ClaimGrants{Driver: driver, Pool: "node-a", Cards: s.Cards, Get: func(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
		gets[name]++
		if fail {
			return nil, errors.New("the API server is away")
		}
		return claims[name], nil
	}}
	got, err := g.Grants(context.Background(), []*corev1.Pod{pod, other, waiting})
	if err != nil {
		t.Fatal(err)
	}
	grant := func(p *corev1.Pod, c, card string, bytes int64, share string) usage.Grant {
		return usage.Grant{Namespace: p.Namespace, Pod: p.Name, Container: c, Card: card, Bytes: bytes, Share: share}
	}
	want := []usage.Grant{
		grant(pod, "main", "GPU-aaa", 10*gib, "claim-shared/gpu/card-0"),
		grant(pod, "main", "GPU-ccc", 3*gib, "claim-train-tmpl-x7k2/small/card-2"),
		grant(pod, "main", "GPU-ccc", 20*gib, "claim-train-tmpl-x7k2/big/card-2"),
		grant(pod, "main", "GPU-bbb", 40*gib, "claim-train-tmpl-x7k2/whole/card-1"),
		grant(pod, "side", "GPU-ccc", 3*gib, "claim-train-tmpl-x7k2/small/card-2"), // shared with main
		grant(other, "main", "GPU-aaa", 4*gib, "claim-mine/gpu/card-0"),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("grants (-want +got):\n%s", d)
	}

	// The next sweep reads no allocated claim again, and asks again for
	// the one not reserved for its pod yet; a pod gone drops its claims.
	fail = true
	if _, err := g.Grants(context.Background(), []*corev1.Pod{pod, other}); err != nil {
		t.Errorf("second sweep with the claims cached: %v", err)
	}
	if _, err := g.Grants(context.Background(), []*corev1.Pod{pod, waiting}); err == nil {
		t.Errorf("a claim the API server cannot give: no error, want one (the sweep is skipped, not taken for no grant)")
	}
	if gets["shared"] != 1 || gets["train-tmpl-x7k2"] != 1 || gets["late"] != 2 {
		t.Errorf("reads per claim %v, want shared and train-tmpl-x7k2 once, late twice", gets)
	}
	fail = false
	if _, err := g.Grants(context.Background(), []*corev1.Pod{other}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Grants(context.Background(), []*corev1.Pod{pod}); err != nil || gets["shared"] != 2 {
		t.Errorf("a pod's claims read again after the pod left the list: %d reads (%v), want 2", gets["shared"], err)
	}

	// A finished pod holds nothing.
	pod.Status.Phase = corev1.PodSucceeded
	if got, _ := g.Grants(context.Background(), []*corev1.Pod{pod}); len(got) != 0 {
		t.Errorf("grants of a finished pod: %v", got)
	}
}
