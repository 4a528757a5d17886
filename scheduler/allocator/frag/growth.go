package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// The growth of frag when a pod is placed on a node, as decide's Score
// computes it: the closed form (closed.go) when the node's cards with free
// units are alike and the pod changed at most one card, as the fast path
// computes it; the definition (measure.go) otherwise.

// fragGrowth is frag after the pod minus frag before, in the node's units
// (negative when placing the pod makes the node less fragmented, e.g. a
// pod that exactly fills a card's unusable leftover). free is the policy's
// free slice after placement (Unusable, TakenWhole when negative).
func fragGrowth(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload) float64 {
	return fragGrowthTotals(node, free, req, w, nil)
}

// fragGrowthTotals is fragGrowth that also fills *tot, when not nil, with
// totalsOf(node, free, w).
func fragGrowthTotals(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload, tot *nodeTotals) float64 {
	if tot != nil {
		*tot = totalsOf(node, free, w)
	}
	ix := index(w)
	if ix == nil || ix.weight == 0 {
		return 0
	}
	var ha allocator.HostResources
	hostB, hostA := node.HostFree, hostAfter(node, req, &ha)
	s := node.Summary()
	if s == nil {
		cs := node.CardSummary()
		s = &cs
	}
	if s.Alike {
		// The cards the pod changed: at most one for the closed form.
		changed, f, u := 0, int64(0), int64(0)
		for i := range node.Cards {
			c := &node.Cards[i]
			if before, after := c.Free(), cardAfter(c, free[i]); c.Schedulable() && after != before {
				changed, f, u = changed+1, before, before-after
			}
		}
		if changed <= 1 {
			v := alikeShares{free: s.Shares[:s.N], cap0: s.CardCapacity}
			for _, f := range v.free {
				if f >= v.cap0 {
					v.unused++
				}
			}
			slot, _ := ix.modelSlot(s.Model)
			return ix.alikeGrowthHosts(v, slot, hostB, hostA, changed == 1, f, u)
		}
	}
	return ix.growthByDefinition(node, free, hostB, hostA)
}
