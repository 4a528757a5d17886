package frag

import "github.com/gpushare/gpushare/scheduler/allocator"

// The fragmentation measure as defined (see frag.go): the reference that the
// closed forms (closed.go) are tested against, and the growth wherever they
// do not apply (growth.go) and FGD's card on unlike cards (frag.go).

// maxStackCards is how many cards the measure's callers hold in stack
// buffers; larger nodes use heap buffers.
const maxStackCards = 16

// measure computes frag for one node state, card by card and class by class,
// exactly as defined. free[i] is what card i has free in that state (0 or
// negative: nothing), host the node's free CPU and memory in that state
// (nil: unknown, never blocking), bits[i] the model bit of card i in
// ix.models (0 when no shape names its model).
func (ix *fragIndex) measure(node *allocator.Node, free []int64, bits []uint64, host *allocator.HostResources) float64 {
	var total int64
	for _, f := range free {
		if f > 0 {
			total += f
		}
	}
	if total == 0 {
		return 0
	}
	t := float64(total)
	frag := ix.noGPU * t
	for ci := range ix.classes {
		c := &ix.classes[ci]
		fit := c.hostFitWeight(host)
		if fit < c.weight {
			frag += (c.weight - fit) * t
		}
		if fit <= 0 {
			continue
		}
		n := 0
		var lost int64
		for i, f := range free {
			if f <= 0 {
				continue
			}
			if !c.anyModel && c.mask&bits[i] == 0 {
				lost += f
				continue
			}
			need := c.units
			if need == 0 {
				need = node.Cards[i].Capacity
			}
			if f >= need {
				n++
			} else {
				lost += f
			}
		}
		if n < c.count {
			frag += fit * t
		} else {
			frag += fit * float64(lost)
		}
	}
	return frag
}

// growthByDefinition is frag after the pod minus frag before, both states
// measured; free is the policy's free slice after the pod.
func (ix *fragIndex) growthByDefinition(node *allocator.Node, free []int64, hostB, hostA *allocator.HostResources) float64 {
	var vecBuf [maxStackCards]int64
	var bitsBuf [maxStackCards]uint64
	vec, bits := vecBuf[:0], bitsBuf[:0]
	if n := len(node.Cards); n > maxStackCards {
		vec, bits = make([]int64, n), make([]uint64, n)
	} else {
		vec, bits = vec[:n], bits[:n]
	}
	ix.modelBits(node, bits)
	afterFree(node, free, vec)
	after := ix.measure(node, vec, bits, hostA)
	beforeFree(node, vec)
	return after - ix.measure(node, vec, bits, hostB)
}

// modelBit is model's bit and position in ix.models; known is false (and
// the bit 0) when no shape names the model.
func (ix *fragIndex) modelBit(model string) (bit uint64, pos int, known bool) {
	for k, m := range ix.models {
		if m == model {
			return 1 << uint(k), k, true
		}
	}
	return 0, 0, false
}

// modelBits fills bits[i] with the model bit of card i.
func (ix *fragIndex) modelBits(node *allocator.Node, bits []uint64) {
	for i := range node.Cards {
		if i > 0 && node.Cards[i].Model == node.Cards[i-1].Model {
			bits[i] = bits[i-1]
			continue
		}
		bits[i], _, _ = ix.modelBit(node.Cards[i].Model)
	}
}

// beforeFree is what each schedulable card has free before the pod.
func beforeFree(node *allocator.Node, out []int64) {
	for i, c := range node.Cards {
		if c.Schedulable() {
			out[i] = c.Free()
		} else {
			out[i] = 0
		}
	}
}

// afterFree turns a policy's free slice into what each card really has free
// after the pod: cards this pod could not use keep their free share.
func afterFree(node *allocator.Node, free []int64, out []int64) {
	for i := range node.Cards {
		out[i] = cardAfter(&node.Cards[i], free[i])
	}
}

// cardAfter is what card c really has free after the pod, given f, what a
// policy's free slice holds for it: a card the pod could not use (Unusable)
// keeps its free share if schedulable, a card taken whole has none.
func cardAfter(c *allocator.Card, f int64) int64 {
	switch {
	case f >= 0:
		return f
	case f == allocator.Unusable && c.Schedulable():
		return c.Free()
	}
	return 0
}

// hostAfter is the node's free CPU and memory once req is placed, or nil
// when the node's are unknown.
func hostAfter(node *allocator.Node, req allocator.Request, buf *allocator.HostResources) *allocator.HostResources {
	if node.HostFree == nil {
		return nil
	}
	*buf = allocator.HostResources{CPUMilli: node.HostFree.CPUMilli - req.Host.CPUMilli, MemoryMiB: node.HostFree.MemoryMiB - req.Host.MemoryMiB}
	return buf
}
