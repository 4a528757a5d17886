package usage

import (
	"context"
	"fmt"
	"testing"
)

// busyNode is 8 cards × 50 processes, every process in its own pod
// container with a grant (400 pods), cgroups in a fake /proc tree on disk.
func busyNode(b *testing.B) *node {
	n := newNode(b, 8)
	pid := uint32(1000)
	for card := 0; card < 8; card++ {
		for i := 0; i < 50; i++ {
			p := n.pod(fmt.Sprintf("p-%d-%d", card, i), "c")
			n.grant(p, "c", card, 2)
			n.run(pid, p, 0, card, gib)
			pid++
		}
	}
	return n
}

// BenchmarkSweep is one sweep of a busy node in the steady state: the
// processes were there at the previous sweep (their owners are cached).
// Target: under 5 ms (docs/deviceplugin.md, "Memory sampling").
func BenchmarkSweep(b *testing.B) {
	s := busyNode(b).sampler()
	ctx := context.Background()
	if _, err := s.Sweep(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := s.Sweep(ctx)
		if err != nil || len(out.Usages) != 400 {
			b.Fatalf("sweep: %d usages, %v", len(out.Usages), err)
		}
	}
}

// BenchmarkSweepCold is the first sweep (or one where all 400 processes are
// new): one /proc/<pid>/cgroup read per process.
func BenchmarkSweepCold(b *testing.B) {
	n := busyNode(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := n.sampler().Sweep(ctx)
		if err != nil || len(out.Usages) != 400 {
			b.Fatalf("sweep: %d usages, %v", len(out.Usages), err)
		}
	}
}
