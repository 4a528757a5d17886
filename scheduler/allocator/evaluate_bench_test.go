package allocator_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// benchWorkload is about the size of what the openb default trace teaches:
// ~150 shapes (shares, full cards, 2/4/8 whole cards, CPU-only, a few with
// a model constraint), each with several CPU/memory requests.
func benchWorkload(rng *rand.Rand) *allocator.Workload {
	w := &allocator.Workload{}
	gpu := []allocator.Shape{{Units: 1000}, {WholeCards: 2}, {WholeCards: 4}, {WholeCards: 8}, {}}
	for u := int64(50); u < 1000; u += 50 {
		gpu = append(gpu, allocator.Shape{Units: u})
	}
	gpu = append(gpu, allocator.Shape{Units: 500, Models: []string{"V100M32"}}, allocator.Shape{Units: 1000, Models: []string{"T4", "P100"}})
	for _, s := range gpu {
		for k := 0; k < 6; k++ {
			s.Host = allocator.HostResources{CPUMilli: int64(1+rng.Intn(32)) * 1000, MemoryMiB: int64(1+rng.Intn(64)) * 1024}
			s.Weight = float64(1 + rng.Intn(100))
			w.Observe(s)
		}
	}
	return w
}

// benchNodes are n nodes of 8 cards, partly used the way a busy openb
// cluster is: a quarter of the cards unused, a quarter held whole, the rest
// holding one or two of the trace's common shares.
func benchNodes(rng *rand.Rand, n int) []allocator.Node {
	nodes := make([]allocator.Node, n)
	models := []string{"G2", "T4", "V100M32", "P100"}
	shares := []int64{810, 470, 940, 650, 320, 230, 460, 590, 1000}
	for i := range nodes {
		cards := make([]allocator.Card, 8)
		m := models[rng.Intn(len(models))]
		for k := range cards {
			cards[k] = allocator.Card{Index: k, Model: m, Capacity: 1000, State: api.CardHealthy}
			switch rng.Intn(4) {
			case 0: // unused
			case 1:
				cards[k].Used, cards[k].Whole = 1000, true
			default:
				cards[k].Used = shares[rng.Intn(len(shares))]
			}
		}
		nodes[i] = allocator.Node{Name: fmt.Sprint("n", i), Cards: cards,
			HostFree: &allocator.HostResources{CPUMilli: int64(rng.Intn(96)) * 1000, MemoryMiB: int64(rng.Intn(384)) * 1024}}
	}
	return nodes
}

// benchmarkEvaluate measures one filter/prioritize call: the policy's
// Evaluate on every node for one pod of 300 units.
func benchmarkEvaluate(b *testing.B, policy string) {
	p, err := registry.Lookup(policy)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			w, nodes, req, decisions := benchCase(p, n)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				for i := range nodes {
					decisions[i] = p.Evaluate(&nodes[i], req, w)
				}
				_ = allocator.BestNodes(decisions)
			}
			// CPU time per call: on a shared machine, wall time (ns/op) also
			// counts waiting for a core; with GOMAXPROCS=1 this is the work.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchmarkEvaluateAll is benchmarkEvaluate through EvaluateAll, the
// extender's path (one scratch buffer for all nodes, node pointers, every
// node summarized as the extender's cache summarizes its snapshots).
func benchmarkEvaluateAll(b *testing.B, policy string) {
	p, err := registry.Lookup(policy)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			w, nodes, req, decisions := benchCase(p, n)
			for i := range nodes {
				nodes[i].Summarize()
			}
			ptrs := pointers(nodes)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				p.EvaluateAll(ptrs, req, w, decisions)
				_ = allocator.BestNodes(decisions)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchCase is one benchmark's input: n benchNodes, the benchWorkload (one
// rng, seed 1), a pod of 300 units, 4 CPUs and 8 GiB, and room for the
// decisions. p has evaluated one node already, so that what it derives from
// the workload (Workload.Derived: the fragmentation-aware policies' index) is
// built before the timer starts, not in the first iteration.
func benchCase(p *allocator.Policy, n int) (*allocator.Workload, []allocator.Node, allocator.Request, []allocator.Decision) {
	rng := rand.New(rand.NewSource(1))
	w := benchWorkload(rng)
	nodes := benchNodes(rng, n)
	req := allocator.Request{Demands: []allocator.Demand{{Container: "c", Units: 300}}, Host: allocator.HostResources{CPUMilli: 4000, MemoryMiB: 8192}}
	_ = p.Evaluate(&nodes[0], req, w)
	return w, nodes, req, make([]allocator.Decision, n)
}

func BenchmarkFGDEvaluate(b *testing.B) { benchmarkEvaluate(b, "fgd") }

func BenchmarkFragEvaluate(b *testing.B) { benchmarkEvaluate(b, "frag") }

func BenchmarkBinpackEvaluate(b *testing.B) { benchmarkEvaluate(b, "binpack") }

func BenchmarkFGDEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "fgd") }

func BenchmarkFragEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "frag") }

func BenchmarkBinpackEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "binpack") }

func BenchmarkSpreadEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "spread") }

func BenchmarkBestfitEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "bestfit") }
