package server

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// BenchmarkPreempt times the preempt verb when kube-scheduler hands it every
// node as a candidate: nodes of 4 cards of 40 GiB, each card full with five
// 8 GiB pods of priority 0, kube-scheduler's victims one pod of each card,
// the preemptor 40 GiB at priority 100. (kube-scheduler itself offers at most
// max(100, 10 % of the nodes) candidates: 500 at 5,000 nodes.)
func BenchmarkPreempt(b *testing.B) {
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var nodes []*corev1.Node
			for i := 0; i < n; i++ {
				nodes = append(nodes, fixture.MakeNode(fmt.Sprintf("node-%05d", i)).Cards(4, 40).Obj())
			}
			e := newEnv(b, envOpts{}, nodes)
			e.srv.memo = nil
			idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
			args := &extenderv1.ExtenderPreemptionArgs{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
			for _, node := range nodes {
				mv := &extenderv1.MetaVictims{}
				for c := 0; c < 4; c++ {
					for k := 0; k < 5; k++ {
						p := podtest.Make("bench", fmt.Sprintf("%s-%d-%d", node.Name, c, k)).GPU("main", 8).AssignOn(node.Name, api.PhaseAllocated, c).Obj()
						e.cache.SetPod(p)
						if err := idx.Add(p); err != nil {
							b.Fatal(err)
						}
						if k == 0 {
							mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
						}
					}
				}
				args.NodeNameToMetaVictims[node.Name] = mv
			}
			e.srv.pods = corelisters.NewPodLister(idx)
			args.Pod = prioritized(podtest.Make("ns", "big").GPU("main", 40), 100)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				res, err := e.srv.Preempt(ctx, args)
				if err != nil || len(res.NodeNameToMetaVictims) != n || len(res.NodeNameToMetaVictims["node-00000"].Pods) != 5 {
					b.Fatalf("preempt: %v, %d nodes", err, len(res.NodeNameToMetaVictims))
				}
			}
		})
	}
}
