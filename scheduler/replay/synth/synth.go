// Package synth generates seeded GPU-memory (GiB) workloads for the replay:
// a heterogeneous fleet (80 GiB A100/H100-class, 48 GiB L40S-class and
// 24 GiB L4-class cards mixed) and a population of pods asking for 1–80 GiB
// of one card, whole cards, or no GPU. It exists so that what a setting
// costs in packing can be measured on workloads nobody tuned the policies
// on, at any cluster size, not only on the openb trace and what is derived
// from it (docs/packing.md).
//
// A workload is named FLEET/REQUESTS, one of Fleets and one of Requests
// (e.g. "mixed/mixed"). Generate is a pure function of the spec, the node
// count and the seed: the same three give the same trace.
package synth

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/replay"
)

// NodeType is one kind of node of a fleet.
type NodeType struct {
	Model string
	// CardGiB is each card's memory; Cards how many the node has.
	CardGiB int64
	Cards   int
	// CPUMilli and MemoryMiB are the node's allocatable CPU and memory.
	CPUMilli, MemoryMiB int64
	// Weight is the node type's share of the fleet's nodes (weights of a
	// fleet need not sum to 1).
	Weight float64
}

// Bucket is one kind of request of a mix.
type Bucket struct {
	// MinGiB..MaxGiB (inclusive, uniform) is the share of one card a pod
	// asks for; WholeCards > 0 asks for that many whole cards instead;
	// both zero: a pod without a GPU.
	MinGiB, MaxGiB int64
	WholeCards     int
	// Weight is the bucket's share of the pods.
	Weight float64
}

const gib = 1024 // MiB

// Fleets are the node mixes by name.
var Fleets = map[string][]NodeType{
	// A general-purpose cluster: 80 GiB training nodes beside 24 GiB
	// inference nodes.
	"mixed": {
		{Model: "A100-SXM4-80GB", CardGiB: 80, Cards: 8, CPUMilli: 128000, MemoryMiB: 1024 * gib, Weight: 0.35},
		{Model: "H100-SXM5-80GB", CardGiB: 80, Cards: 8, CPUMilli: 192000, MemoryMiB: 2048 * gib, Weight: 0.2},
		{Model: "L4", CardGiB: 24, Cards: 4, CPUMilli: 48000, MemoryMiB: 192 * gib, Weight: 0.3},
		{Model: "L4", CardGiB: 24, Cards: 8, CPUMilli: 96000, MemoryMiB: 384 * gib, Weight: 0.15},
	},
	// Mostly small-card inference nodes, a few large ones.
	"inference": {
		{Model: "L4", CardGiB: 24, Cards: 4, CPUMilli: 48000, MemoryMiB: 192 * gib, Weight: 0.45},
		{Model: "L40S", CardGiB: 48, Cards: 4, CPUMilli: 64000, MemoryMiB: 512 * gib, Weight: 0.3},
		{Model: "A100-PCIE-80GB", CardGiB: 80, Cards: 4, CPUMilli: 64000, MemoryMiB: 512 * gib, Weight: 0.25},
	},
	// Mostly 8-card 80 GiB nodes.
	"training": {
		{Model: "H100-SXM5-80GB", CardGiB: 80, Cards: 8, CPUMilli: 192000, MemoryMiB: 2048 * gib, Weight: 0.55},
		{Model: "A100-SXM4-80GB", CardGiB: 80, Cards: 8, CPUMilli: 128000, MemoryMiB: 1024 * gib, Weight: 0.35},
		{Model: "L4", CardGiB: 24, Cards: 8, CPUMilli: 96000, MemoryMiB: 384 * gib, Weight: 0.1},
	},
}

// Requests are the request mixes by name.
var Requests = map[string][]Bucket{
	// Every size from 1 to 80 GiB, whole cards and CPU-only pods.
	"mixed": {
		{MinGiB: 1, MaxGiB: 8, Weight: 0.3},
		{MinGiB: 9, MaxGiB: 24, Weight: 0.25},
		{MinGiB: 25, MaxGiB: 48, Weight: 0.15},
		{MinGiB: 49, MaxGiB: 80, Weight: 0.1},
		{WholeCards: 1, Weight: 0.06},
		{WholeCards: 2, Weight: 0.04},
		{WholeCards: 4, Weight: 0.03},
		{WholeCards: 8, Weight: 0.02},
		{Weight: 0.05},
	},
	// Mostly small shares, as model serving asks.
	"small": {
		{MinGiB: 1, MaxGiB: 4, Weight: 0.35},
		{MinGiB: 5, MaxGiB: 12, Weight: 0.35},
		{MinGiB: 13, MaxGiB: 24, Weight: 0.2},
		{MinGiB: 25, MaxGiB: 48, Weight: 0.05},
		{WholeCards: 1, Weight: 0.02},
		{Weight: 0.03},
	},
	// Mostly large shares and whole cards, as training asks.
	"large": {
		{MinGiB: 1, MaxGiB: 16, Weight: 0.15},
		{MinGiB: 17, MaxGiB: 40, Weight: 0.2},
		{MinGiB: 41, MaxGiB: 80, Weight: 0.3},
		{WholeCards: 1, Weight: 0.1},
		{WholeCards: 2, Weight: 0.1},
		{WholeCards: 4, Weight: 0.08},
		{WholeCards: 8, Weight: 0.05},
		{Weight: 0.02},
	},
}

// Spec is a fleet and a request mix.
type Spec struct {
	Fleet    string
	Requests string
}

// ParseSpec reads "FLEET/REQUESTS" (e.g. "mixed/mixed"); an unknown name is
// an error that lists the known ones.
func ParseSpec(s string) (Spec, error) {
	fleet, reqs, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Spec{}, fmt.Errorf("synthetic workload %q: want FLEET/REQUESTS, fleets %s, requests %s", s, names(Fleets), names(Requests))
	}
	if _, ok := Fleets[fleet]; !ok {
		return Spec{}, fmt.Errorf("synthetic workload %q: unknown fleet %q (want one of %s)", s, fleet, names(Fleets))
	}
	if _, ok := Requests[reqs]; !ok {
		return Spec{}, fmt.Errorf("synthetic workload %q: unknown request mix %q (want one of %s)", s, reqs, names(Requests))
	}
	return Spec{Fleet: fleet, Requests: reqs}, nil
}

// Maker is the generator of the workload named by spec (ParseSpec) at any
// size and seed: what replay.Options.Generate takes.
func Maker(spec string) (func(nodes int, seed int64) (*replay.Trace, error), error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return func(nodes int, seed int64) (*replay.Trace, error) { return Generate(s, nodes, seed) }, nil
}

// FleetNames are the names of Fleets, sorted.
func FleetNames() []string { return strings.Split(names(Fleets), ", ") }

// RequestNames are the names of Requests, sorted.
func RequestNames() []string { return strings.Split(names(Requests), ", ") }

func names[T any](m map[string]T) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// Generate is spec's workload on nodes nodes with seed: a memory-format
// trace (api.UnitGiB) named "synth_FLEET_REQUESTS_nN_sSEED".
//
// Nodes: each node type gets round(weight share × nodes) nodes, the
// remainders going to the largest fractions (so 1,000 nodes of "mixed" are
// exactly 350 / 200 / 300 / 150), in an order shuffled by seed. Pods: each
// pod's bucket is drawn by weight, its share uniformly in the bucket's
// range, until the pods' GPU request reaches the fleet's capacity (the
// replay then shuffles and adds copies up to its inflation). A share's pod
// asks 125 millicores per GiB (at least 500) and 1 GiB of memory per GiB
// plus 1; a whole-card pod 8 cores and 32 GiB a card; a pod without a GPU
// 1–4 cores and 4–16 GiB. Nodes have the CPU and memory of their class of
// machine: filled with pods of a few GiB, an 8-card 80 GiB node runs out of
// CPU first, as a real one would.
//
// Whole cards are asked of the fleet's largest cards (their models, e.g.
// the 80 GiB A100s and H100s), as a job that wants a whole card wants a
// large one; so a whole card is the same size wherever it goes and the
// unallocated share compares settings fairly (an L4 given as a whole
// card would count 24 GiB allocated, an H100 80). A share larger than
// every card of the fleet, or more whole cards than a node of the largest
// cards has, is not generated (the bucket is cut to the fleet), so every
// pod fits an empty node.
func Generate(spec Spec, nodes int, seed int64) (*replay.Trace, error) {
	fleet, ok := Fleets[spec.Fleet]
	if !ok {
		return nil, fmt.Errorf("unknown fleet %q (want one of %s)", spec.Fleet, names(Fleets))
	}
	buckets, ok := Requests[spec.Requests]
	if !ok {
		return nil, fmt.Errorf("unknown request mix %q (want one of %s)", spec.Requests, names(Requests))
	}
	if nodes < 1 {
		return nil, fmt.Errorf("%d nodes: want at least 1", nodes)
	}
	rng := rand.New(rand.NewSource(seed))
	t := &replay.Trace{
		Name: fmt.Sprintf("synth_%s_%s_n%d_s%d", spec.Fleet, spec.Requests, nodes, seed),
		Unit: api.UnitGiB,
	}
	counts := Apportion(weights(fleet, func(n NodeType) float64 { return n.Weight }), nodes)
	var maxCard int64
	for i, nt := range fleet {
		if counts[i] > 0 {
			maxCard = max(maxCard, nt.CardGiB)
		}
	}
	maxCards := 0    // of a node of the largest cards
	var big []string // the models of the largest cards
	for i, nt := range fleet {
		if counts[i] > 0 && nt.CardGiB == maxCard {
			maxCards = max(maxCards, nt.Cards)
			if !slices.Contains(big, nt.Model) {
				big = append(big, nt.Model)
			}
		}
	}
	for i, count := range counts {
		nt := fleet[i]
		for range count {
			n := replay.NodeSpec{CPUMilli: nt.CPUMilli, MemoryMiB: nt.MemoryMiB, Cards: make([]replay.CardSpec, nt.Cards)}
			for k := range n.Cards {
				n.Cards[k] = replay.CardSpec{Model: nt.Model, Capacity: nt.CardGiB}
			}
			t.Nodes = append(t.Nodes, n)
		}
	}
	rng.Shuffle(len(t.Nodes), func(i, j int) { t.Nodes[i], t.Nodes[j] = t.Nodes[j], t.Nodes[i] })
	for i := range t.Nodes {
		t.Nodes[i].Name = fmt.Sprintf("node-%05d", i)
	}
	t.WholeCardUnits = maxCard // every whole card is one of the largest
	cum := cumulative(weights(buckets, func(b Bucket) float64 { return b.Weight }))
	var total int64
	for total < t.Capacity() {
		b := buckets[pick(cum, rng.Float64())]
		p := replay.PodSpec{Name: fmt.Sprintf("pod-%06d", len(t.Pods))}
		switch {
		case b.WholeCards > 0:
			p.WholeCards = min(b.WholeCards, maxCards)
			p.Models = big
			p.CPUMilli = int64(p.WholeCards) * 8000
			p.MemoryMiB = int64(p.WholeCards) * 32 * gib
		case b.MaxGiB > 0:
			lo, hi := min(b.MinGiB, maxCard), min(b.MaxGiB, maxCard)
			p.Units = lo + rng.Int63n(hi-lo+1)
			p.CPUMilli = max(125*p.Units, 500)
			p.MemoryMiB = (p.Units + 1) * gib
		default:
			p.CPUMilli = 1000 + 1000*rng.Int63n(4)
			p.MemoryMiB = (4 + 4*rng.Int63n(4)) * gib
		}
		t.Pods = append(t.Pods, p)
		total += t.GPURequest(p)
	}
	return t, nil
}

// Apportion splits n into len(w) counts in proportion to the weights w
// (largest remainder; ties to the earlier weight): the counts sum to n and
// each is within 1 of its exact share. Worked example: weights 0.35, 0.2,
// 0.3, 0.15 of 10 → exact 3.5, 2, 3, 1.5 → 3, 2, 3, 1 and one more to the
// first of the two halves: 4, 2, 3, 1.
func Apportion(w []float64, n int) []int {
	var sum float64
	for _, v := range w {
		sum += v
	}
	counts := make([]int, len(w))
	rem := make([]float64, len(w))
	left := n
	for i, v := range w {
		exact := float64(n) * v / sum
		counts[i] = int(exact)
		rem[i] = exact - float64(counts[i])
		left -= counts[i]
	}
	order := make([]int, len(w))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for k := 0; left > 0; k = (k + 1) % len(order) {
		counts[order[k]]++
		left--
	}
	return counts
}

func weights[T any](items []T, w func(T) float64) []float64 {
	out := make([]float64, len(items))
	for i, it := range items {
		out[i] = w(it)
	}
	return out
}

// cumulative is the running sum of w normalised to end at 1.
func cumulative(w []float64) []float64 {
	out := make([]float64, len(w))
	var sum float64
	for i, v := range w {
		sum += v
		out[i] = sum
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// pick is the index of the first cumulative weight above u (u in [0, 1)).
func pick(cum []float64, u float64) int {
	for i, c := range cum {
		if u < c {
			return i
		}
	}
	return len(cum) - 1
}
