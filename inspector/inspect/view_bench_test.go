package inspect

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// BenchmarkBuild measures Build on a large cluster: 1,000 nodes of 8 cards
// and 16,000 pods (two per card), the work between the API lists and the
// printer on every run of the plugin.
func BenchmarkBuild(b *testing.B) {
	var nodes []corev1.Node
	var pods []corev1.Pod
	for n := 0; n < 1000; n++ {
		name := fmt.Sprintf("gpu-%04d", n)
		var cards []api.Card
		for c := 0; c < 8; c++ {
			cards = append(cards, gpu(name, c, h100, 79))
		}
		nodes = append(nodes, *makeNode(b, name, fmt.Sprintf("10.%d.%d.1", n/256, n%256)).inventory(api.UnitGiB, cards...).obj())
		for c := 0; c < 8; c++ {
			for k := 0; k < 2; k++ {
				p := runningPod("ml", fmt.Sprintf("%s-%d-%d", name, c, k)).GPU("c", 30).AssignOn(name, api.PhaseAllocated, c)
				pods = append(pods, *p.Obj())
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods})
		if len(v.Nodes) != 1000 || v.Totals[0].Allocated != 16000*30 {
			b.Fatalf("built %d nodes, %d allocated", len(v.Nodes), v.Totals[0].Allocated)
		}
	}
}
