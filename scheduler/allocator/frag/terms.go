package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// The frag policy's terms besides the growth: node totals, stranded GPU and
// model scarcity (see New).

// nodeTotals is one pass over a node's schedulable cards for the frag
// policy's terms.
type nodeTotals struct {
	cards int
	// capacity, and free before and after the pod (cards the pod could not
	// use keep their free share), in units.
	capacity, before, after int64
	// scarcity is the GPU the pod takes on this node, each unit weighted
	// by the pressure on its card's model: taking a scarce model's
	// capacity for a pod that could run elsewhere costs the pods that
	// cannot. For a pod that insists on one model it is the same on every
	// node it fits, so it only steers pods that have a choice.
	scarcity float64
}

// add counts one schedulable card of that capacity, with before free before
// the pod and after after it, of a model under that pressure.
func (t *nodeTotals) add(capacity, before, after int64, pressure float64) {
	t.cards++
	t.capacity += capacity
	t.before += before
	t.after += after
	if taken := before - after; taken > 0 {
		t.scarcity += float64(taken) * pressure
	}
}

// totalsOf is the totals of node with the policy's free slice free (after
// the pod).
func totalsOf(node *allocator.Node, free []int64, w *allocator.Workload) nodeTotals {
	var t nodeTotals
	ix := index(w)
	if ix == nil {
		ix = &fragIndex{}
	}
	for i := range node.Cards {
		// decide marks every unschedulable card Unusable.
		c := &node.Cards[i]
		if free[i] == allocator.Unusable && !c.Schedulable() {
			continue
		}
		before := c.Free()
		after := cardAfter(c, free[i])
		pressure := 0.0
		if after < before {
			_, pressure = ix.modelSlot(c.Model)
		}
		t.add(c.Capacity, before, after, pressure)
	}
	return t
}

// cardUnits is the mean card capacity (1 without cards), to express terms
// in cards.
func (t nodeTotals) cardUnits() float64 {
	if t.cards == 0 || t.capacity == 0 {
		return 1
	}
	return float64(t.capacity) / float64(t.cards)
}

// strandGrowth is how much the node's stranded GPU grows with the pod.
//
// Stranded GPU is free GPU that the node's CPU and memory cannot feed if
// future GPU pods ask for them in the workload's proportions: with free GPU
// G units, free CPU C and memory M, and the workload's GPU pods asking rc
// millicores and rm MiB per GPU unit, the node can use at most
// min(G, C/rc, M/rm) units; the rest, max(0, G − min(C/rc, M/rm)), is
// stranded. Where FGD's measure looks one pod ahead, this looks at the node
// filled with the workload's average GPU pod: it sees that a CPU-only pod
// on a node with many free cards eats the CPU those cards will need.
//
// Worked example: 4 free cards (4,000 units), 20 cores and plenty of memory
// free, GPU pods asking 10 cores per card (rc = 10 millicores per unit):
// usable min(4000, 20000/10) = 2,000, stranded 2,000 units (2 cards).
// t is the node's totals, ix the workload's index.
func (t nodeTotals) strandGrowth(node *allocator.Node, req allocator.Request, ix *fragIndex) float64 {
	if ix == nil || node.HostFree == nil || ix.gpuCPU+ix.gpuMem == 0 || t.cards == 0 {
		return 0
	}
	units := ix.gpuShareUnits + ix.gpuWholeCards*t.cardUnits()
	if units <= 0 {
		return 0
	}
	rc, rm := ix.gpuCPU/units, ix.gpuMem/units
	h := *node.HostFree
	ha := allocator.HostResources{CPUMilli: h.CPUMilli - req.Host.CPUMilli, MemoryMiB: h.MemoryMiB - req.Host.MemoryMiB}
	return stranded(float64(t.after), ha, rc, rm) - stranded(float64(t.before), h, rc, rm)
}

func stranded(g float64, h allocator.HostResources, rc, rm float64) float64 {
	usable := g
	if rc > 0 {
		usable = min(usable, max(0, float64(h.CPUMilli))/rc)
	}
	if rm > 0 {
		usable = min(usable, max(0, float64(h.MemoryMiB))/rm)
	}
	return g - usable
}
