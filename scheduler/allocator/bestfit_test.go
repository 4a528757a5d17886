package allocator

import (
	"math"
	"testing"

	"github.com/gpushare/gpushare/api"
)

func TestBestFitScoreByHand(t *testing.T) {
	node := &Node{
		Cards: []Card{
			{Capacity: 1000, Used: 500, State: api.CardHealthy},
			{Capacity: 1000, State: api.CardHealthy},
			{Capacity: 1000, State: api.CardHealthy},
		},
		HostFree: &HostResources{CPUMilli: 40000, MemoryMiB: 1 << 20},
	}
	bf := NewBestFit()
	// A whole card and 8 cores: 1.5 cards and 32 cores left:
	// −(0.5·32/128 + 0.5·1.5/8) = −0.21875.
	d := bf.Evaluate(node, Request{Demands: []Demand{{Units: 1000}}, Host: HostResources{CPUMilli: 8000}}, nil)
	if math.Abs(d.Score-(-0.21875)) >= 1e-6 {
		t.Errorf("score = %v, want -0.21875", d.Score)
	}
}
