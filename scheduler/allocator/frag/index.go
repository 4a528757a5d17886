package frag

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// fragIndex is a workload's shapes arranged for the fragmentation measure:
// GPU shapes grouped into classes that need the same cards, with weights
// normalised to shares of all pods seen, and the tables the closed forms
// (closed.go) read. The tables are earned by BenchmarkFragEvaluateAll and
// BenchmarkFGDEvaluateAll at 5,000 nodes: without the level tables each
// call executes about 2.3× the instructions (2.1× for fgd), without
// shareRank 1.2× (1.4×).
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
	maxHost allocator.HostResources
	// GPU pods' totals, each pod weighted by its share: CPU and memory
	// requested, share units and whole cards. Their ratio is how much CPU
	// and memory the workload's GPU pods want per GPU unit.
	gpuCPU, gpuMem, gpuShareUnits, gpuWholeCards float64
	// pressure[i] is the scarcity of models[i] (see modelPressure); empty
	// without ModelCapacity.
	pressure []float64
	// For the closed form of the growth on nodes whose cards are alike and
	// whose CPU and memory block no shape (see fragIndex.alikeGrowth):
	// gpuWeight is the sum of the classes' weights; shareUnits the per-card
	// units of the share classes (units > 0), ascending; for a card model
	// slot s (bit s of a class mask, or len(models) for a model no shape
	// names), shareCum[s][k] is the weight of the first k share classes
	// that accept the model, and wholeCum[s][m] the weight of the
	// whole-card classes that accept it and ask for at most m cards
	// (m ≤ maxStackCards).
	gpuWeight  float64
	shareUnits []int64
	// shareRank[x] is the number of share classes of at most x units, for
	// x up to the largest share (see fragIndex.sharesUpTo); empty when that
	// is over maxShareRank units.
	shareRank []uint16
	shareCum  [][]float64
	wholeCum  [][maxStackCards + 1]float64
	// The same by CPU level, for nodes whose free memory blocks no shape,
	// and by memory level, for nodes whose free CPU blocks no shape (see
	// fragIndex.tableRow).
	byCPU, byMem levelTable
}

// levelTable holds shareCum and wholeCum by level of one host resource
// (CPU or memory): levels are the classes' distinct requests of it,
// ascending; a node with x free is at level r, the number of levels ≤ x.
// share and whole hold, for level r and model slot s, shareCum and
// wholeCum with each class weighing only its requests of at most
// levels[r−1] (see row). Empty when the tables would exceed maxLevelTable
// entries.
type levelTable struct {
	levels       []int64
	share, whole []float64
	ns, slots    int
}

// maxShareRank bounds the largest share for which the index keeps
// shareRank (2 bytes per unit): cards of up to a few thousand units
// (openb's 1,000 per GPU, GiB).
const maxShareRank = 1 << 12

// maxLevelTable bounds the entries of a levelTable (8 bytes each).
const maxLevelTable = 1 << 16

// row returns the cumulative weights for level r and model slot s.
func (lt *levelTable) row(r, s int) (share []float64, whole []float64) {
	i := r*lt.slots + s
	return lt.share[i*lt.ns : (i+1)*lt.ns], lt.whole[i*(maxStackCards+1) : (i+1)*(maxStackCards+1)]
}

// level is the level of a node with x free.
func (lt *levelTable) level(x int64) int { return countAtMost(lt.levels, x) }

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
	minHost, maxHost allocator.HostResources
}

// accepts reports whether the class may use cards of model slot slot (the
// model's position in fragIndex.models, or models, their number, for a
// model no shape names).
func (c *fragClass) accepts(slot, models int) bool {
	return c.anyModel || (slot < models && c.mask&(1<<uint(slot)) != 0)
}

type hostWeight struct {
	host   allocator.HostResources
	weight float64
}

// hostFitWeight is the part of the class's weight whose CPU and memory fit
// in free (all of it when free is unknown).
func (c *fragClass) hostFitWeight(free *allocator.HostResources) float64 {
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

func buildFragIndex(shapes []allocator.Shape, capacity map[string]allocator.ModelCapacity) *fragIndex {
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
	// Classes by card count, then by per-card units: the cumulative tables
	// take the share classes (count 1) in ascending units. Host requests by
	// ascending CPU let hostFitWeight stop early.
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
	ix.buildCumulative()
	return ix
}

// buildCumulative fills gpuWeight, shareUnits, shareCum and wholeCum.
func (ix *fragIndex) buildCumulative() {
	slots := len(ix.models) + 1
	var share []*fragClass
	for i := range ix.classes {
		c := &ix.classes[i]
		ix.gpuWeight += c.weight
		if c.units > 0 {
			share = append(share, c) // ascending units: classes are sorted
		}
	}
	ix.shareUnits = make([]int64, len(share))
	for k, c := range share {
		ix.shareUnits[k] = c.units
	}
	if n := len(share); n > 0 && share[n-1].units <= maxShareRank && n <= math.MaxUint16 {
		ix.shareRank = make([]uint16, share[n-1].units+1)
		k := 0
		for x := range ix.shareRank {
			for k < n && ix.shareUnits[k] <= int64(x) {
				k++
			}
			ix.shareRank[x] = uint16(k)
		}
	}
	ix.shareCum = make([][]float64, slots)
	ix.wholeCum = make([][maxStackCards + 1]float64, slots)
	for s := 0; s < slots; s++ {
		cum := make([]float64, len(share)+1)
		for k, c := range share {
			cum[k+1] = cum[k]
			if c.accepts(s, len(ix.models)) {
				cum[k+1] += c.weight
			}
		}
		ix.shareCum[s] = cum
		for i := range ix.classes {
			c := &ix.classes[i]
			if c.units == 0 && c.count <= maxStackCards && c.accepts(s, len(ix.models)) {
				for m := c.count; m <= maxStackCards; m++ {
					ix.wholeCum[s][m] += c.weight
				}
			}
		}
	}
	ix.byCPU = ix.buildLevels(func(h allocator.HostResources) int64 { return h.CPUMilli })
	ix.byMem = ix.buildLevels(func(h allocator.HostResources) int64 { return h.MemoryMiB })
}

// buildLevels builds the level table of the host resource key returns.
// Level by level, each class's fit grows by its requests at that level
// (one pass over the requests, sorted by key).
func (ix *fragIndex) buildLevels(key func(allocator.HostResources) int64) levelTable {
	type item struct {
		k      int64
		class  int
		weight float64
	}
	var items []item
	for i := range ix.classes {
		for _, h := range ix.classes[i].hosts {
			items = append(items, item{key(h.host), i, h.weight})
		}
	}
	slices.SortStableFunc(items, func(a, b item) int {
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	var levels []int64
	for _, it := range items {
		if len(levels) == 0 || levels[len(levels)-1] != it.k {
			levels = append(levels, it.k)
		}
	}
	slots := len(ix.models) + 1
	lt := levelTable{levels: levels, ns: len(ix.shareUnits) + 1, slots: slots}
	rows := (len(levels) + 1) * slots
	if rows*(lt.ns+maxStackCards+1) > maxLevelTable {
		return levelTable{}
	}
	lt.share = make([]float64, rows*lt.ns)
	lt.whole = make([]float64, rows*(maxStackCards+1))
	fit := make([]float64, len(ix.classes))
	next := 0
	for r := 0; r <= len(levels); r++ {
		// fit[i]: class i's requests of at most levels[r−1].
		for r > 0 && next < len(items) && items[next].k <= levels[r-1] {
			fit[items[next].class] += items[next].weight
			next++
		}
		for s := 0; s < slots; s++ {
			cum, whole := lt.row(r, s)
			k := 0
			for i := range ix.classes {
				c := &ix.classes[i]
				switch {
				case c.units > 0:
					cum[k+1] = cum[k]
					if c.accepts(s, len(ix.models)) {
						cum[k+1] += fit[i]
					}
					k++
				case c.count <= maxStackCards && c.accepts(s, len(ix.models)):
					whole[c.count] += fit[i]
				}
			}
			for m := 1; m <= maxStackCards; m++ {
				whole[m] += whole[m-1]
			}
		}
	}
	return lt
}

// indexKey is the key of a workload's index (Workload.Derived).
type indexKey struct{}

// index returns w's index, built on first use and kept with w
// (Workload.Derived); when w's Shapes changed since without Reindex, a
// temporary one (correct, but slower and allocating on every call).
func index(w *allocator.Workload) *fragIndex {
	if w == nil {
		return nil
	}
	ix := w.Derived(indexKey{}, func(w *allocator.Workload) any { return buildFragIndex(w.Shapes, w.ModelCapacity) }).(*fragIndex)
	if ix.shapes != len(w.Shapes) {
		return buildFragIndex(w.Shapes, w.ModelCapacity)
	}
	return ix
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
func modelPressure(shapes []allocator.Shape, capacity map[string]allocator.ModelCapacity, models []string, total float64) []float64 {
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
