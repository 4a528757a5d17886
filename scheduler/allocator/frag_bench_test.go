package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpushare/gpushare/api"
)

// benchWorkload is about the size of what the openb default trace teaches:
// ~150 shapes (shares, full cards, 2/4/8 whole cards, CPU-only, a few with
// a model constraint), each with several CPU/memory requests.
func benchWorkload(rng *rand.Rand) *Workload {
	w := &Workload{}
	gpu := []Shape{{Units: 1000}, {WholeCards: 2}, {WholeCards: 4}, {WholeCards: 8}, {}}
	for u := int64(50); u < 1000; u += 50 {
		gpu = append(gpu, Shape{Units: u})
	}
	gpu = append(gpu, Shape{Units: 500, Models: []string{"V100M32"}}, Shape{Units: 1000, Models: []string{"T4", "P100"}})
	for _, s := range gpu {
		for k := 0; k < 6; k++ {
			s.Host = HostResources{CPUMilli: int64(1+rng.Intn(32)) * 1000, MemoryMiB: int64(1+rng.Intn(64)) * 1024}
			s.Weight = float64(1 + rng.Intn(100))
			w.Observe(s)
		}
	}
	// What the fragmentation-aware policies derive from w (their index,
	// Workload.Derived) is built here, before any timer starts.
	_ = w.index()
	return w
}

// benchNodes are n nodes of 8 cards, partly used the way a busy openb
// cluster is: a quarter of the cards unused, a quarter held whole, the rest
// holding one or two of the trace's common shares.
func benchNodes(rng *rand.Rand, n int) []Node {
	nodes := make([]Node, n)
	models := []string{"G2", "T4", "V100M32", "P100"}
	shares := []int64{810, 470, 940, 650, 320, 230, 460, 590, 1000}
	for i := range nodes {
		cards := make([]Card, 8)
		m := models[rng.Intn(len(models))]
		for k := range cards {
			cards[k] = Card{Index: k, Model: m, Capacity: 1000, State: api.CardHealthy}
			switch rng.Intn(4) {
			case 0: // unused
			case 1:
				cards[k].Used, cards[k].Whole = 1000, true
			default:
				cards[k].Used = shares[rng.Intn(len(shares))]
			}
		}
		nodes[i] = Node{Name: fmt.Sprint("n", i), Cards: cards,
			HostFree: &HostResources{CPUMilli: int64(rng.Intn(96)) * 1000, MemoryMiB: int64(rng.Intn(384)) * 1024}}
	}
	return nodes
}

// benchmarkEvaluate measures one filter/prioritize call: the policy's
// Evaluate on every node for one pod of 300 units.
func benchmarkEvaluate(b *testing.B, policy string) {
	p, err := Lookup(policy)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			w := benchWorkload(rng)
			nodes := benchNodes(rng, n)
			req := Request{Demands: []Demand{{Container: "c", Units: 300}}, Host: HostResources{CPUMilli: 4000, MemoryMiB: 8192}}
			decisions := make([]Decision, len(nodes))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				for i := range nodes {
					decisions[i] = p.Evaluate(&nodes[i], req, w)
				}
				_ = BestNodes(decisions)
			}
			// CPU time per call: on a shared machine, wall time (ns/op) also
			// counts waiting for a core; with GOMAXPROCS=1 this is the work.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchmarkEvaluateAll is benchmarkEvaluate through EvaluateAll, the
// extender's path (one scratch buffer for all nodes, node pointers).
func benchmarkEvaluateAll(b *testing.B, policy string) {
	p, err := Lookup(policy)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1213, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			w := benchWorkload(rng)
			nodes := benchNodes(rng, n)
			ptrs := make([]*Node, len(nodes))
			for i := range nodes {
				ptrs[i] = &nodes[i]
			}
			req := Request{Demands: []Demand{{Container: "c", Units: 300}}, Host: HostResources{CPUMilli: 4000, MemoryMiB: 8192}}
			decisions := make([]Decision, len(nodes))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				p.EvaluateAll(ptrs, req, w, decisions)
				_ = BestNodes(decisions)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func BenchmarkFGDEvaluate(b *testing.B) { benchmarkEvaluate(b, "fgd") }

func BenchmarkFragEvaluate(b *testing.B) { benchmarkEvaluate(b, "frag") }

func BenchmarkBinpackEvaluate(b *testing.B) { benchmarkEvaluate(b, "binpack") }

func BenchmarkFGDEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "fgd") }

func BenchmarkFragEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "frag") }

func BenchmarkBinpackEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "binpack") }

func BenchmarkSpreadEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "spread") }

func BenchmarkBestfitEvaluateAll(b *testing.B) { benchmarkEvaluateAll(b, "bestfit") }
