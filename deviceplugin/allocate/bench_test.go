package allocate

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// BenchmarkBuildAndMatch is the work of one Allocate on a busy node: a
// snapshot of 200 pending and 200 running pods, then the match.
func BenchmarkBuildAndMatch(b *testing.B) {
	var pods []*corev1.Pod
	for i := 0; i < 200; i++ {
		pods = append(pods, podtest.Bound(node, fmt.Sprintf("pending-%d", i), i).GPU("a", int64(1+i%8)).GPU("b", 2).Assign(api.PhaseAssigned, c0, c1).Obj())
		pods = append(pods, podtest.Bound(node, fmt.Sprintf("running-%d", i), i).GPU("a", 1).Assign(api.PhaseAllocated, c1).Phase(corev1.PodRunning).Obj())
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
