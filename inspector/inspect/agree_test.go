package inspect

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// TestBuildAgreesWithTheExtendersCache feeds the same nodes and pods to the
// inspector (Build) and to the extender's cache and checks that every card
// holds the same units in both: the two programs apply one rule for which
// pods hold units (api.HoldsUnits) and one reading of their records.
func TestBuildAgreesWithTheExtendersCache(t *testing.T) {
	nodes := []corev1.Node{
		*makeNode(t, "gpu-a", "10.0.0.1").inventory(api.UnitGiB, gpu("gpu-a", 0, a100, 40), gpu("gpu-a", 1, a100, 40)).obj(),
		*makeNode(t, "gpu-b", "10.0.0.2").inventory(api.UnitGiB, gpu("gpu-b", 0, a100, 40)).obj(),
	}
	pods := []corev1.Pod{
		*runningPod("ns", "running").GPU("c", 4).AssignOn("gpu-a", api.PhaseAllocated, 0).Obj(),
		*runningPod("ns", "terminating").GPU("c", 8).AssignOn("gpu-a", api.PhaseAllocated, 1).Deleting().Obj(),
		*runningPod("ns", "unknown").GPU("c", 2).AssignOn("gpu-b", api.PhaseAllocated, 0).Phase(corev1.PodUnknown).Obj(),
		*runningPod("ns", "pending").GPU("c", 3).AssignOn("gpu-b", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
		*runningPod("ns", "succeeded").GPU("c", 16).AssignOn("gpu-a", api.PhaseAllocated, 0).Phase(corev1.PodSucceeded).Obj(),
		*runningPod("ns", "failed").GPU("c", 16).AssignOn("gpu-b", api.PhaseAllocated, 0).Phase(corev1.PodFailed).Obj(),
		*runningPod("ns", "failed-terminating").GPU("c", 16).AssignOn("gpu-a", api.PhaseAllocated, 1).Phase(corev1.PodFailed).Deleting().Obj(),
		*runningPod("ns", "unbound").GPU("c", 5).Phase(corev1.PodPending).Obj(),
	}

	type cardKey struct {
		node  string
		index int
	}
	fromInspector := map[cardKey]int64{}
	for _, n := range Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods}).Nodes {
		for _, c := range n.Cards {
			fromInspector[cardKey{n.Name, c.Index}] = c.Allocated
		}
	}
	c := cache.New()
	for i := range nodes {
		c.SetNode(&nodes[i])
	}
	for i := range pods {
		c.SetPod(&pods[i])
	}
	fromCache := map[cardKey]int64{}
	for _, n := range c.Inspect() {
		for _, card := range n.Cards {
			fromCache[cardKey{n.Name, card.Index}] = card.Used
		}
	}
	want := map[cardKey]int64{{"gpu-a", 0}: 4, {"gpu-a", 1}: 8, {"gpu-b", 0}: 5}
	if diff := cmp.Diff(want, fromInspector, cmp.AllowUnexported(cardKey{})); diff != "" {
		t.Errorf("inspector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, fromCache, cmp.AllowUnexported(cardKey{})); diff != "" {
		t.Errorf("extender's cache (-want +got):\n%s", diff)
	}
}

// TestBuildAgreesWithTheExtenderOnDRA: the inspector reading the API server
// (Build) and reading the extender's /inspect (cache.AddDRA on the cache's
// nodes, viewFromExtender) show every card of the DRA scenario with the
// same memory, claims and total, and the same claims not counted: both
// read the DRA objects with api.Names.DRAUsage.
func TestBuildAgreesWithTheExtenderOnDRA(t *testing.T) {
	names := api.DefaultNames()
	cl := cluster(draScenario(t))
	c := cache.New()
	for i := range cl.Nodes {
		c.SetNode(&cl.Nodes[i])
	}
	for i := range cl.Pods {
		c.SetPod(&cl.Pods[i])
	}
	usage := names.DRAUsage(pointers(cl.DRA.Slices), pointers(cl.DRA.Claims))
	fromExtender := viewFromExtender(cache.AddDRA(c.Inspect(), usage), nil)

	type card struct {
		Allocated, Claimed, Total int64
		Claims                    string
	}
	cards := func(v View) map[string]card {
		out := map[string]card{}
		for _, n := range v.Nodes {
			var uncounted []string
			for _, u := range n.Uncounted {
				uncounted = append(uncounted, u.Namespace+"/"+u.Name)
			}
			out[n.Name] = card{Claims: fmt.Sprintf("DRA %v, uncounted %v", n.DRA, uncounted)}
			for _, c := range n.Cards {
				var claims []string
				for _, cl := range c.Claims {
					claims = append(claims, fmt.Sprintf("%s/%s %d %v", cl.Namespace, cl.Name, cl.Units, cl.Pods))
				}
				out[fmt.Sprintf("%s/%d", n.Name, c.Index)] = card{c.Allocated, c.Claimed, c.Total, strings.Join(claims, ", ")}
			}
		}
		return out
	}
	want := cards(Build(names, cl))
	if len(want) < 5 {
		t.Fatalf("the scenario shows too little: %v", want)
	}
	if diff := cmp.Diff(want, cards(fromExtender)); diff != "" {
		t.Errorf("extender (-inspector +extender):\n%s", diff)
	}
}
