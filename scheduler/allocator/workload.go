package allocator

import (
	"slices"
	"strconv"
	"strings"
)

// Observe records one more pod of shape s: its weight is added to an equal
// shape already recorded (same Units, WholeCards, Models and Host), or s is
// appended. A zero s.Weight counts as 1. Observe keeps the precomputed index
// that fragmentation-aware policies read up to date, so it must not run
// while another goroutine evaluates a policy with w: callers update a
// workload between decisions (the simulator after each arrival, the
// extender's cache under its lock) and hand policies a settled value.
//
// This is how a policy learns the workload online, from pods it has seen.
func (w *Workload) Observe(s Shape) {
	if s.Weight == 0 {
		s.Weight = 1
	}
	for i := range w.Shapes {
		if sameShape(w.Shapes[i], s) {
			w.Shapes[i].Weight += s.Weight
			w.Reindex()
			return
		}
	}
	s.Models = slices.Clone(s.Models)
	w.Shapes = append(w.Shapes, s)
	w.Reindex()
}

// Reindex rebuilds the precomputed index from Shapes. Call it after changing
// Shapes directly; policies given a workload whose index is missing or stale
// build a temporary one on every call (correct, but slower and allocating).
func (w *Workload) Reindex() {
	w.idx = buildFragIndex(w.Shapes, w.ModelCapacity)
}

func sameShape(a, b Shape) bool {
	return a.Units == b.Units && a.WholeCards == b.WholeCards && a.Host == b.Host && slices.Equal(a.Models, b.Models)
}

// fragIndex is a workload's shapes arranged for the fragmentation measure:
// GPU shapes grouped into classes that need the same cards, with weights
// normalised to shares of all pods seen.
type fragIndex struct {
	// shapes is len(Workload.Shapes) and weight the total weight when the
	// index was built; a mismatch means the index is stale.
	shapes int
	weight float64
	// noGPU is the share of pods that ask for no GPU.
	noGPU float64
	// models are the models any shape names; bit i of a class's mask is models[i].
	models  []string
	classes []fragClass
	// weights[i] is classes[i].weight; maxHost bounds every GPU shape's
	// CPU and memory request (a node with that much free blocks none).
	weights []float64
	maxHost HostResources
	// GPU pods' totals, each pod weighted by its share: CPU and memory
	// requested, share units and whole cards. Their ratio is how much CPU
	// and memory the workload's GPU pods want per GPU unit.
	gpuCPU, gpuMem, gpuShareUnits, gpuWholeCards float64
	// pressure[i] is the scarcity of models[i] (see modelPressure); empty
	// without ModelCapacity.
	pressure []float64
}

// fragClass is the GPU shapes that need the same cards: count cards with
// units free each (units == 0: count whole unused cards), of the models in
// mask (any model when anyModel).
type fragClass struct {
	units    int64
	count    int
	anyModel bool
	mask     uint64
	// weight is the class's share of all pods; hosts splits it by CPU and
	// memory request, and minHost/maxHost bound those requests so that most
	// nodes need not look at hosts at all.
	weight           float64
	hosts            []hostWeight
	minHost, maxHost HostResources
}

type hostWeight struct {
	host   HostResources
	weight float64
}

// hostFitWeight is the part of the class's weight whose CPU and memory fit
// in free (all of it when free is unknown).
func (c *fragClass) hostFitWeight(free *HostResources) float64 {
	if free == nil || free.Fits(c.maxHost) {
		return c.weight
	}
	if !free.Fits(c.minHost) {
		return 0
	}
	var w float64
	for _, h := range c.hosts { // by ascending CPU
		if h.host.CPUMilli > free.CPUMilli {
			break
		}
		if h.host.MemoryMiB <= free.MemoryMiB {
			w += h.weight
		}
	}
	return w
}

func buildFragIndex(shapes []Shape, capacity map[string]ModelCapacity) *fragIndex {
	ix := &fragIndex{shapes: len(shapes)}
	for _, s := range shapes {
		if s.Weight > 0 {
			ix.weight += s.Weight
		}
	}
	if ix.weight == 0 {
		return ix
	}
	modelBit := func(m string) uint64 {
		for i, known := range ix.models {
			if known == m {
				return 1 << uint(i)
			}
		}
		if len(ix.models) == 64 {
			return 0 // more than 64 models: treated as not matching (conservative)
		}
		ix.models = append(ix.models, m)
		return 1 << uint(len(ix.models)-1)
	}
	byKey := map[string]int{}
	for _, s := range shapes {
		if s.Weight <= 0 {
			continue
		}
		share := s.Weight / ix.weight
		if s.WholeCards <= 0 && s.Units <= 0 {
			ix.noGPU += share
			continue
		}
		ix.gpuCPU += share * float64(s.Host.CPUMilli)
		ix.gpuMem += share * float64(s.Host.MemoryMiB)
		if s.WholeCards > 0 {
			ix.gpuWholeCards += share * float64(s.WholeCards)
		} else {
			ix.gpuShareUnits += share * float64(s.Units)
		}
		c := fragClass{units: s.Units, count: 1, anyModel: len(s.Models) == 0}
		if s.WholeCards > 0 {
			c.units, c.count = 0, s.WholeCards
		}
		for _, m := range s.Models {
			c.mask |= modelBit(m)
		}
		models := slices.Clone(s.Models)
		slices.Sort(models)
		key := strings.Join([]string{strconv.FormatInt(c.units, 10), strconv.Itoa(c.count), strings.Join(models, "|")}, "/")
		i, ok := byKey[key]
		if !ok {
			i = len(ix.classes)
			byKey[key] = i
			c.minHost, c.maxHost = s.Host, s.Host
			ix.classes = append(ix.classes, c)
		}
		cl := &ix.classes[i]
		cl.weight += share
		cl.minHost.CPUMilli = min(cl.minHost.CPUMilli, s.Host.CPUMilli)
		cl.minHost.MemoryMiB = min(cl.minHost.MemoryMiB, s.Host.MemoryMiB)
		cl.maxHost.CPUMilli = max(cl.maxHost.CPUMilli, s.Host.CPUMilli)
		cl.maxHost.MemoryMiB = max(cl.maxHost.MemoryMiB, s.Host.MemoryMiB)
		merged := false
		for k := range cl.hosts {
			if cl.hosts[k].host == s.Host {
				cl.hosts[k].weight += share
				merged = true
				break
			}
		}
		if !merged {
			cl.hosts = append(cl.hosts, hostWeight{host: s.Host, weight: share})
		}
	}
	// Classes by card count, then by per-card units: the measure walks the
	// share classes (count 1) in ascending units along a node's sorted free
	// shares. Host requests by ascending CPU let hostFitWeight stop early.
	slices.SortStableFunc(ix.classes, func(a, b fragClass) int {
		switch {
		case a.count != b.count:
			return a.count - b.count
		case a.units < b.units:
			return -1
		case a.units > b.units:
			return 1
		}
		return 0
	})
	ix.pressure = modelPressure(shapes, capacity, ix.models, ix.weight)
	for i := range ix.classes {
		c := &ix.classes[i]
		slices.SortStableFunc(c.hosts, func(a, b hostWeight) int { return int(a.host.CPUMilli - b.host.CPUMilli) })
		ix.weights = append(ix.weights, c.weight)
		ix.maxHost.CPUMilli = max(ix.maxHost.CPUMilli, c.maxHost.CPUMilli)
		ix.maxHost.MemoryMiB = max(ix.maxHost.MemoryMiB, c.maxHost.MemoryMiB)
	}
	return ix
}

// index returns the workload's precomputed index, or builds one when it is
// missing or stale (Shapes changed without Reindex).
func (w *Workload) index() *fragIndex {
	if w == nil {
		return nil
	}
	if ix := w.idx; ix != nil && ix.shapes == len(w.Shapes) {
		return ix
	}
	return buildFragIndex(w.Shapes, w.ModelCapacity)
}

// modelPressure estimates, for each model, the share of its capacity that
// the pods insisting on it will want by the time the arrived GPU request
// equals the cluster's capacity, capped at 1. A shape with a model
// constraint spreads its GPU request over its allowed models in proportion
// to their capacity (a whole card counts its models' mean card capacity);
// D_m is what lands on model m, D the workload's whole GPU request (per pod
// seen), C_m and C the capacities:
//
//	pressure(m) = min(1, (D_m / D) · (C / C_m))
//
// Worked example (openb gpuspec33): T4 holds 842 of 6,212 cards, and pods
// that insist on T4 ask for 1,049 cards' worth at 100% arrival: pressure 1;
// G2 holds 4,392 cards and G2-only pods ask for 393: pressure 0.09.
func modelPressure(shapes []Shape, capacity map[string]ModelCapacity, models []string, total float64) []float64 {
	if len(capacity) == 0 || total == 0 || len(models) == 0 {
		return nil
	}
	var capAll int64
	cards := 0
	for _, c := range capacity {
		capAll += c.Units
		cards += c.Cards
	}
	if capAll <= 0 || cards == 0 {
		return nil
	}
	meanCard := float64(capAll) / float64(cards)
	demand := make([]float64, len(models))
	var all float64
	for _, s := range shapes {
		if s.Weight <= 0 {
			continue
		}
		set := slices.Compact(slices.Sorted(slices.Values(s.Models)))
		var setUnits int64
		setCards := 0
		for _, m := range set {
			setUnits += capacity[m].Units
			setCards += capacity[m].Cards
		}
		req := float64(s.Units)
		if s.WholeCards > 0 {
			card := meanCard
			if len(set) > 0 && setCards > 0 {
				card = float64(setUnits) / float64(setCards)
			}
			req = float64(s.WholeCards) * card
		}
		req *= s.Weight / total
		all += req
		if len(set) == 0 || req == 0 || setUnits == 0 {
			continue
		}
		for _, m := range set {
			if i := slices.Index(models, m); i >= 0 {
				demand[i] += req * float64(capacity[m].Units) / float64(setUnits)
			}
		}
	}
	if all == 0 {
		return nil
	}
	out := make([]float64, len(models))
	for i, m := range models {
		if c := capacity[m].Units; c > 0 {
			out[i] = min(1, demand[i]/all*float64(capAll)/float64(c))
		}
	}
	return out
}
