package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpushare/gpushare/api"
)

// manyContainers is a request of n share demands of 1–8 units (many ties,
// as real pods' containers have) and a node of 8 cards large enough to
// place them all, so Decide does the whole work: order the demands, choose
// a card for each, score.
func manyContainers(n int) (*Node, Request) {
	rng := rand.New(rand.NewSource(int64(n)))
	req := Request{Demands: make([]Demand, n)}
	for i := range req.Demands {
		req.Demands[i] = Demand{Container: fmt.Sprint("c", i), Units: 1 + rng.Int63n(8)}
	}
	node := &Node{Name: "n", Cards: make([]Card, 8)}
	for k := range node.Cards {
		node.Cards[k] = Card{Index: k, Capacity: api.MaxUnits, State: api.CardHealthy}
	}
	return node, req
}

// BenchmarkDecideContainers is one node's decision for a pod of n
// containers (binpack): before the ordering was n log n, the 16,384-container
// pod of issue 16 cost seconds here.
func BenchmarkDecideContainers(b *testing.B) {
	p := NewBinpack()
	for _, n := range []int{1, 8, 128, 1024, 16384} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			node, req := manyContainers(n)
			b.ReportAllocs()
			for b.Loop() {
				if d := p.Evaluate(node, req, nil); !d.Fits {
					b.Fatal(d.Message())
				}
			}
		})
	}
}
