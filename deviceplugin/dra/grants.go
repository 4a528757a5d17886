package dra

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/usage"
)

// Memory enforcement and usage metrics for claims: a container's grant on a
// card is the memory its claims consumed there (the allocation's
// consumedCapacity), so that the usage sampler measures it as it measures a
// device-plugin container against its units.

// GrantsOf are the memory grants of pod's containers through claims of
// driver in pool: for every container (init and sidecar containers
// included) and every claim it names (with its request, when it names one),
// the allocation results of driver's devices in pool, on the card
// cardOf(device) names, consuming the result's memory
// (api.DRAConsumedMemory: without consumed memory, the whole card). claimOf returns the pod's claim of that
// pod-level name, nil when it is unknown or not allocated. A container that
// names one claim twice (two requests) is granted the sum. Each grant names
// its allocation result (Grant.Share: claim UID, request, device): the
// containers naming one claim share its memory, and are measured together.
func GrantsOf(driver, pool string, pod *corev1.Pod, claimOf func(podClaim string) *resourceapi.ResourceClaim, cardOf func(device string) (nvml.Card, bool)) []usage.Grant {
	var out []usage.Grant
	add := func(c *corev1.Container) {
		for _, ref := range c.Resources.Claims {
			claim := claimOf(ref.Name)
			if claim == nil || claim.Status.Allocation == nil {
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Driver != driver || r.Pool != pool || ref.Request != "" && resourceclaim.BaseRequestRef(r.Request) != ref.Request && r.Request != ref.Request {
					continue
				}
				card, ok := cardOf(r.Device)
				if !ok {
					continue
				}
				q, _ := api.DRAConsumedMemory(r, api.DRAQuantity(card.MemoryMiB, api.UnitMiB))
				share := string(claim.UID) + "/" + r.Request + "/" + r.Device
				out = append(out, usage.Grant{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name, Card: card.UUID, Bytes: q.Value(), Share: share})
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		add(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// ClaimGrants reads the grants of the node's pods from their
// ResourceClaims, fetching each claim once: an allocated claim reserved for
// its pod does not change its allocation while the pod runs.
type ClaimGrants struct {
	Driver, Pool string
	// Cards lists the node's cards (the inventory store's Cards).
	Cards func() []nvml.Card
	// Get reads one claim from the API server.
	Get func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

	mu     sync.Mutex
	claims map[claimKey]*resourceapi.ResourceClaim
}

type claimKey struct {
	pod  types.UID
	name string // the claim's object name
}

// Grants are the grants of pods' containers through claims of the driver
// (usage.Sampler.Claims). A claim that cannot be read is an error: the
// sweep is then skipped rather than taking its containers for ones without
// a grant.
func (g *ClaimGrants) Grants(ctx context.Context, pods []*corev1.Pod) ([]usage.Grant, error) {
	byIndex := map[int]nvml.Card{}
	for _, c := range g.Cards() {
		byIndex[c.Index] = c
	}
	cardOf := func(device string) (nvml.Card, bool) {
		i, ok := CardIndex(device)
		if !ok {
			return nvml.Card{}, false
		}
		c, ok := byIndex[i]
		return c, ok
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[claimKey]*resourceapi.ResourceClaim{}
	var out []usage.Grant
	for _, pod := range pods {
		if len(pod.Spec.ResourceClaims) == 0 || !api.HoldsUnits(pod) {
			continue
		}
		claims := map[string]*resourceapi.ResourceClaim{}
		for i := range pod.Spec.ResourceClaims {
			pc := &pod.Spec.ResourceClaims[i]
			name, _, err := resourceclaim.Name(pod, pc)
			if err != nil || name == nil {
				continue // its claim is not created yet: the pod does not run
			}
			k := claimKey{pod.UID, *name}
			claim, err := g.claim(ctx, k, pod)
			if err != nil {
				return nil, err
			}
			if claim != nil {
				seen[k] = claim
				claims[pc.Name] = claim
			}
		}
		out = append(out, GrantsOf(g.Driver, g.Pool, pod, func(n string) *resourceapi.ResourceClaim { return claims[n] }, cardOf)...)
	}
	g.claims = seen // claims of pods gone are dropped
	return out, nil
}

// claim is k's claim: the cached one, or read now. A claim not allocated,
// or not (yet) reserved for the pod, is not cached (nil: no grant yet).
func (g *ClaimGrants) claim(ctx context.Context, k claimKey, pod *corev1.Pod) (*resourceapi.ResourceClaim, error) {
	if c, ok := g.claims[k]; ok {
		return c, nil
	}
	c, err := g.Get(ctx, pod.Namespace, k.name)
	if err != nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s of pod %s: %w", pod.Namespace, k.name, pod.Name, err)
	}
	if c.Status.Allocation == nil || !resourceclaim.IsReservedForPod(pod, c, false) {
		return nil, nil
	}
	return c, nil
}
