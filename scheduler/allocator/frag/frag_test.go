package frag

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// fragNode has two 1,000-unit T4 cards, the first with 700 used, and 8
// cores / 32 GiB free.
func fragNode() *allocator.Node {
	return &allocator.Node{
		Name: "n",
		Cards: []allocator.Card{
			{Index: 0, Model: "T4", Capacity: 1000, Used: 700, State: api.CardHealthy},
			{Index: 1, Model: "T4", Capacity: 1000, State: api.CardHealthy},
		},
		HostFree: &allocator.HostResources{CPUMilli: 8000, MemoryMiB: 32768},
	}
}

// fragWorkload: 2 pods of 500 units (4 cores), 1 of a full card (4 cores),
// 1 CPU-only (2 cores), 1 of 200 units that wants 16 cores.
func fragWorkload() *allocator.Workload {
	w := &allocator.Workload{}
	w.Observe(allocator.Shape{Units: 500, Host: allocator.HostResources{CPUMilli: 4000}})
	w.Observe(allocator.Shape{Units: 500, Host: allocator.HostResources{CPUMilli: 4000}})
	w.Observe(allocator.Shape{Units: 1000, Host: allocator.HostResources{CPUMilli: 4000}})
	w.Observe(allocator.Shape{Host: allocator.HostResources{CPUMilli: 2000}})
	w.Observe(allocator.Shape{Units: 200, Host: allocator.HostResources{CPUMilli: 16000}})
	return w
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestFragMeasureByHand(t *testing.T) {
	node, w := fragNode(), fragWorkload()
	ix := index(w)
	if len(w.Shapes) != 4 {
		t.Fatalf("Observe kept %d shapes, want 4 (the two 500-unit pods merge)", len(w.Shapes))
	}
	before, bits := make([]int64, 2), make([]uint64, 2)
	ix.modelBits(node, bits)
	beforeFree(node, before)
	// Free: 300 and 1,000 (T = 1,300). Shares: 500u 2/5, 1000u 1/5,
	// CPU-only 1/5, 200u@16 cores 1/5.
	//   500u:       card 0 (300 < 500) is lost, card 1 fits: 300 × 0.4 = 120
	//   1000u:      card 0 lost again:                        300 × 0.2 =  60
	//   CPU-only:   asks no GPU, all free is lost:           1300 × 0.2 = 260
	//   200u@16c:   the node has 8 cores, all free is lost:  1300 × 0.2 = 260
	// frag = 700.
	if got := ix.measure(node, before, bits, node.HostFree); !near(got, 700) {
		t.Errorf("frag = %v, want 700", got)
	}
	// Without host information nothing is CPU-blocked: the 200-unit shape
	// uses both cards (300 ≥ 200), so frag = 120 + 60 + 260 + 0 = 440.
	if got := ix.measure(node, before, bits, nil); !near(got, 440) {
		t.Errorf("frag without host = %v, want 440", got)
	}
}

func TestFGDPlacesWhereFragGrowsLeast(t *testing.T) {
	node, w := fragNode(), fragWorkload()
	fgd := NewFGD()
	req := allocator.Request{Demands: []allocator.Demand{{Container: "c", Units: 300}}, Host: allocator.HostResources{CPUMilli: 1000}}
	// On card 0 (300 → 0): free 0 and 1,000, T = 1,000, 7 cores left:
	//   500u 0, 1000u 0, CPU-only 200, 200u@16c 200: frag 400, growth −300.
	// On card 1 (1,000 → 700): free 300 and 700, T = 1,000:
	//   500u 300×0.4 = 120, 1000u no card fits: 1000×0.2 = 200, CPU-only
	//   200, 200u@16c 200: frag 720, growth +20.
	// FGD takes card 0 and scores the node −growth = 300.
	d := fgd.Decide(node, req, w)
	if !d.Fits || d.Placements[0].Grants[0].Card != 0 {
		t.Fatalf("decision = %+v, want card 0", d)
	}
	if !near(d.Score, 300) {
		t.Errorf("score = %v, want 300", d.Score)
	}
	if e := fgd.Evaluate(node, req, w); !near(e.Score, d.Score) {
		t.Errorf("Evaluate score %v differs from Decide's %v", e.Score, d.Score)
	}
}

func TestFGDCountsCPUBlockedAndExcludedModels(t *testing.T) {
	w := &allocator.Workload{}
	w.Observe(allocator.Shape{Units: 500, Models: []string{"V100"}})
	node := fragNode()
	// The only shape wants V100s: every T4 unit is lost, before and after,
	// so placing a model-free pod of 200 units shrinks frag by exactly 200.
	fgd := NewFGD()
	d := fgd.Evaluate(node, allocator.Request{Demands: []allocator.Demand{{Units: 200}}}, w)
	if !near(d.Score, 200) {
		t.Errorf("score = %v, want 200", d.Score)
	}
}

func TestFragWithoutWorkloadIsNeutral(t *testing.T) {
	fgd := NewFGD()
	d := fgd.Evaluate(fragNode(), allocator.Request{Demands: []allocator.Demand{{Units: 200}}}, nil)
	if !d.Fits || d.Score != 0 {
		t.Errorf("decision = %+v, want a fit scored 0", d)
	}
}

func TestObserveMergesEqualShapesAndIndexesClasses(t *testing.T) {
	w := &allocator.Workload{}
	w.Observe(allocator.Shape{Units: 500, Models: []string{"T4"}, Host: allocator.HostResources{CPUMilli: 1000}})
	w.Observe(allocator.Shape{Units: 500, Models: []string{"T4"}, Host: allocator.HostResources{CPUMilli: 1000}})
	w.Observe(allocator.Shape{Units: 500, Models: []string{"T4"}, Host: allocator.HostResources{CPUMilli: 2000}})
	w.Observe(allocator.Shape{WholeCards: 2})
	if len(w.Shapes) != 3 || w.Shapes[0].Weight != 2 {
		t.Fatalf("shapes = %+v, want 3 with the first weighing 2", w.Shapes)
	}
	ix := index(w)
	// One class for the 500-unit T4 pods (two host requests), one for 2 whole cards.
	if len(ix.classes) != 2 {
		t.Fatalf("classes = %+v, want 2", ix.classes)
	}
	c := ix.classes[0]
	if c.units != 500 || c.count != 1 || !near(c.weight, 0.75) || len(c.hosts) != 2 {
		t.Errorf("share class = %+v, want 500 units ×1, weight 0.75, 2 host requests", c)
	}
	if c := ix.classes[1]; c.units != 0 || c.count != 2 || !near(c.weight, 0.25) {
		t.Errorf("whole class = %+v, want 2 whole cards, weight 0.25", c)
	}
	// Of the share class's 0.75, 0.5 asks for 1 core and 0.25 for 2: with
	// 1.5 cores free 0.5 fits, with 0.5 cores nothing, with 2 cores all.
	for _, tc := range []struct {
		cpu  int64
		want float64
	}{{1500, 0.5}, {500, 0}, {2000, 0.75}} {
		if got := c.hostFitWeight(&allocator.HostResources{CPUMilli: tc.cpu}); !near(got, tc.want) {
			t.Errorf("host-fit weight with %d millicores = %v, want %v", tc.cpu, got, tc.want)
		}
	}
}

func TestStrandGrowthByHand(t *testing.T) {
	node := &allocator.Node{HostFree: &allocator.HostResources{CPUMilli: 20000, MemoryMiB: 1 << 20}}
	for i := 0; i < 4; i++ {
		node.Cards = append(node.Cards, allocator.Card{Index: i, Model: "G2", Capacity: 1000, State: api.CardHealthy})
	}
	w := &allocator.Workload{}
	// GPU pods ask for 10 cores per card: rc = 10,000/1,000 = 10 millicores
	// per unit (no memory asked: memory never strands here).
	w.Observe(allocator.Shape{Units: 1000, Host: allocator.HostResources{CPUMilli: 10000}})
	// Before: 4,000 units free, 20 cores feed 2,000: 2,000 stranded.
	// A CPU-only pod of 10 cores: 10 cores feed 1,000: 3,000 stranded.
	cpuPod := allocator.Request{Host: allocator.HostResources{CPUMilli: 10000}}
	free := []int64{1000, 1000, 1000, 1000}
	if got := strandGrowth(node, free, cpuPod, w); !near(got, 1000) {
		t.Errorf("strand growth of a CPU-only pod = %v, want 1000", got)
	}
	// A GPU pod of one card and 10 cores: 3,000 free, 10 cores feed 1,000:
	// 2,000 stranded, no growth.
	gpuPod := allocator.Request{Demands: []allocator.Demand{{Units: 1000}}, Host: allocator.HostResources{CPUMilli: 10000}}
	if got := strandGrowth(node, []int64{0, 1000, 1000, 1000}, gpuPod, w); !near(got, 0) {
		t.Errorf("strand growth of a balanced GPU pod = %v, want 0", got)
	}
	// The frag policy charges the CPU-only pod one card for it.
	frag := New()
	d := frag.Evaluate(node, cpuPod, w)
	noStrand := newPolicy(options{PackWeight: PackWeight, ScarcityWeight: ScarcityWeight}).Evaluate(node, cpuPod, w)
	if !near(noStrand.Score-d.Score, StrandWeight*1) {
		t.Errorf("strand term = %v, want %v", noStrand.Score-d.Score, StrandWeight)
	}
}

func TestModelPressureAndScarcityByHand(t *testing.T) {
	w := &allocator.Workload{ModelCapacity: map[string]allocator.ModelCapacity{
		"A": {Cards: 10, Units: 10000},
		"B": {Cards: 30, Units: 30000},
	}}
	w.Observe(allocator.Shape{Units: 500, Models: []string{"A"}})
	w.Observe(allocator.Shape{WholeCards: 2, Models: []string{"A", "B"}})
	w.Observe(allocator.Shape{Units: 1000, Weight: 2})
	// Per pod seen (4): A-only 500/4 = 125 on A; 2 whole cards of the
	// {A,B} mean 1,000 units: 2,000/4 = 500, split by capacity 125 on A and
	// 375 on B; free pods 2·1,000/4 = 500. D = 1,125.
	// pressure(A) = 250/1,125 · 40,000/10,000 = 0.8889
	// pressure(B) = 375/1,125 · 40,000/30,000 = 0.4444
	ix := index(w)
	for _, tc := range []struct {
		model string
		want  float64
	}{{"A", 250.0 / 1125 * 4}, {"B", 375.0 / 1125 * 4 / 3}} {
		k := -1
		for i, m := range ix.models {
			if m == tc.model {
				k = i
			}
		}
		if k < 0 || !near(ix.pressure[k], tc.want) {
			t.Errorf("pressure(%s) = %v, want %v", tc.model, ix.pressure, tc.want)
		}
	}
	// Taking a whole A card costs 1,000 × 0.8889 units.
	node := &allocator.Node{Cards: []allocator.Card{{Model: "A", Capacity: 1000, State: api.CardHealthy}}}
	if got := scarcityCost(node, []int64{0}, w); !near(got, 1000*250.0/1125*4) {
		t.Errorf("scarcity cost = %v, want %v", got, 1000*250.0/1125*4)
	}
	// Without ModelCapacity there is no pressure.
	w.ModelCapacity = nil
	w.Reindex()
	if got := scarcityCost(node, []int64{0}, w); got != 0 {
		t.Errorf("scarcity cost without capacities = %v, want 0", got)
	}
}

// TestFGDScoreMatchesDefinition checks the fgd score (computed from the
// before state's class stats) against frag(after) − frag(before) computed
// card by card, on random nodes, workloads and pods.
func TestFGDScoreMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	fgd := NewFGD()
	for iter := 0; iter < 2000; iter++ {
		w := &allocator.Workload{}
		for k := 0; k < 1+rng.Intn(10); k++ {
			s := allocator.Shape{Host: allocator.HostResources{CPUMilli: int64(rng.Intn(8)) * 1000}}
			switch rng.Intn(4) {
			case 0:
				s.WholeCards = 1 + rng.Intn(3)
			case 1:
			default:
				s.Units = int64(1+rng.Intn(10)) * 100
			}
			if rng.Intn(3) == 0 {
				s.Models = []string{"A"}
			}
			w.Observe(s)
		}
		node := &allocator.Node{HostFree: &allocator.HostResources{CPUMilli: int64(rng.Intn(10)) * 1000, MemoryMiB: 1 << 20}}
		for i := 0; i < 1+rng.Intn(8); i++ {
			c := allocator.Card{Index: i, Model: []string{"A", "B"}[rng.Intn(2)], Capacity: 1000, State: api.CardHealthy, Used: int64(rng.Intn(11)) * 100}
			node.Cards = append(node.Cards, c)
		}
		req := allocator.Request{Host: allocator.HostResources{CPUMilli: int64(rng.Intn(3)) * 1000}}
		switch rng.Intn(3) {
		case 0:
			req.Demands = []allocator.Demand{{Units: int64(1+rng.Intn(10)) * 100}}
		case 1:
			req.Demands = []allocator.Demand{{WholeCards: 1 + rng.Intn(2)}}
		}
		d := fgd.Decide(node, req, w)
		if !d.Fits {
			continue
		}
		after := make([]int64, len(node.Cards))
		for i, c := range node.Cards {
			after[i] = c.Free()
		}
		for _, p := range d.Placements {
			for _, g := range p.Grants {
				after[g.Card] -= g.Units
			}
		}
		ix := index(w)
		bits := make([]uint64, len(node.Cards))
		ix.modelBits(node, bits)
		before := make([]int64, len(node.Cards))
		beforeFree(node, before)
		hostA := allocator.HostResources{CPUMilli: node.HostFree.CPUMilli - req.Host.CPUMilli, MemoryMiB: node.HostFree.MemoryMiB}
		want := ix.measure(node, after, bits, &hostA) - ix.measure(node, before, bits, node.HostFree)
		if !near(-d.Score, want) {
			t.Fatalf("iteration %d: growth %v, definition %v\nnode %+v\nreq %+v", iter, -d.Score, want, node.Cards, req)
		}
	}
}

func TestFragWithoutHostOrCapacitiesStillPacks(t *testing.T) {
	frag := New()
	w := &allocator.Workload{}
	w.Observe(allocator.Shape{Units: 500})
	// No HostFree, no ModelCapacity: only FGD's term and binpack count.
	// Frag stays 0 either way (the busy node's half card is filled exactly;
	// the empty node's card keeps a usable 500), so binpack decides: the
	// busy node ends full (1.0), the empty one a quarter full.
	busy := &allocator.Node{Cards: []allocator.Card{{Capacity: 1000, Used: 500, State: api.CardHealthy}, {Index: 1, Capacity: 1000, State: api.CardHealthy}}}
	empty := &allocator.Node{Cards: []allocator.Card{{Capacity: 1000, State: api.CardHealthy}, {Index: 1, Capacity: 1000, State: api.CardHealthy}}}
	req := allocator.Request{Demands: []allocator.Demand{{Units: 500}}}
	b, e := frag.Evaluate(busy, req, w), frag.Evaluate(empty, req, w)
	if !b.Fits || !e.Fits || b.Score <= e.Score {
		t.Errorf("busy node %v, empty node %v: want the busy node preferred", b.Score, e.Score)
	}
	if got := frag.Evaluate(empty, req, nil); !got.Fits {
		t.Errorf("nil workload: %+v", got)
	}
}

// strandGrowth is the frag policy's stranded-GPU term for the policy's
// free slice free (after the pod).
func strandGrowth(node *allocator.Node, free []int64, req allocator.Request, w *allocator.Workload) float64 {
	return totalsOf(node, free, w).strandGrowth(node, req, index(w))
}

// scarcityCost is the frag policy's scarcity term (nodeTotals.scarcity).
func scarcityCost(node *allocator.Node, free []int64, w *allocator.Workload) float64 {
	return totalsOf(node, free, w).scarcity
}
