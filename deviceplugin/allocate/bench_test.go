package allocate

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// BenchmarkBuildAndMatch is the work of one Allocate on a busy node: a
// snapshot of 200 pending and 200 running pods, then the match.
func BenchmarkBuildAndMatch(b *testing.B) {
	var pods []*corev1.Pod
	for i := 0; i < 200; i++ {
		pods = append(pods, makePod(fmt.Sprintf("pending-%d", i), i).container("a", int64(1+i%8)).container("b", 2).assign(api.PhaseAssigned, card0, card1).obj())
		pods = append(pods, makePod(fmt.Sprintf("running-%d", i), i).container("a", 1).assign(api.PhaseAllocated, card1).phase(corev1.PodRunning).obj())
	}
	ids := ids(card1, 0, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Match(Build(pods, State{}), ids); err != nil {
			b.Fatal(err)
		}
	}
}
