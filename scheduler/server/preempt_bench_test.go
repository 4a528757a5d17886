package server

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// BenchmarkPreempt times the preempt verb on a full fleet: every node has
// 4 cards of 40 GiB, each holding five 8 GiB pods of priority 0 (20 pods a
// node), and kube-scheduler offers every node as a candidate (in practice
// it offers at most max(10 %, 100) of the nodes). The preemptor asks for
// 40 GiB at priority 100: every card is weighed on every node.
func BenchmarkPreempt(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var nodes []*corev1.Node
			for i := 0; i < n; i++ {
				nodes = append(nodes, fixture.MakeNode(fmt.Sprintf("node-%05d", i)).Cards(4, 40).Obj())
			}
			e := newEnv(b, envOpts{}, nodes)
			pods := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
			victims := map[string]*extenderv1.MetaVictims{}
			for i, node := range nodes {
				for card := 0; card < 4; card++ {
					for k := 0; k < 5; k++ {
						p := podtest.Make("bench", fmt.Sprintf("p%05d-%d-%d", i, card, k)).GPU("main", 8).Priority(0).
							Created(podtest.Epoch.Add(time.Duration(k)*time.Second)).AssignOn(node.Name, api.PhaseAllocated, card).Obj()
						e.cache.SetPod(p)
						if err := pods.Add(p); err != nil {
							b.Fatal(err)
						}
					}
				}
				victims[node.Name] = &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{{UID: "x"}}}
			}
			e.srv.pods = corelisters.NewPodLister(pods)
			e.srv.workers = runtime.GOMAXPROCS(0) // as the extender's command sets it
			args := &extenderv1.ExtenderPreemptionArgs{Pod: podtest.Make("ns", "hi").GPU("main", 40).Priority(100).Obj(), NodeNameToMetaVictims: victims}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				res, err := e.srv.Preempt(ctx, args)
				if err != nil || len(res.NodeNameToMetaVictims) != n {
					b.Fatalf("preempt: %v, %d nodes answered", err, len(res.NodeNameToMetaVictims))
				}
			}
		})
	}
}
