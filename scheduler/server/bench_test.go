package server

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// Benchmark cluster: every node has 8 cards of 80 GiB; 10,000 pods of 1 to
// 20 GiB are cached, bound with assignments, spread at random.
const (
	benchCardsPerNode = 8
	benchCardUnits    = 80
	benchPods         = 10000
)

var benchSizes = []int{100, 1000, 5000}

func benchEnv(b *testing.B, nodes int) (*env, []string) {
	b.Helper()
	return benchEnvPolicy(b, nodes, "binpack")
}

// benchEnvPolicy is benchEnv with the named policy. The server evaluates
// every node on every call (no memo): the fleet does not change between the
// benchmarks' calls, and with the memo they would time only its lookups.
// BenchmarkFilterHTTPConcurrent's burst runs time the memo.
func benchEnvPolicy(b *testing.B, nodes int, policy string) (*env, []string) {
	e, names := benchEnvMemo(b, nodes, policy)
	e.srv.memo = nil
	return e, names
}

// benchEnvMemo is benchEnvPolicy with the server's memo.
func benchEnvMemo(b *testing.B, nodes int, policy string) (*env, []string) {
	b.Helper()
	rng := rand.New(rand.NewSource(1))
	var ns []*corev1.Node
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		ns = append(ns, fixture.MakeNode(names[i]).Cards(benchCardsPerNode, benchCardUnits).Obj())
	}
	e := newEnv(b, envOpts{policy: policy}, ns)
	used := make(map[string]int64)
	for i := 0; i < benchPods; i++ {
		node := names[rng.Intn(nodes)]
		cardIdx := rng.Intn(benchCardsPerNode)
		units := int64(1 + rng.Intn(20))
		key := fmt.Sprintf("%s/%d", node, cardIdx)
		if used[key]+units > benchCardUnits {
			continue
		}
		used[key] += units
		e.cache.SetPod(fixture.MakePod("bench", fmt.Sprintf("p%05d", i)).GPU("main", units).Assign(node, api.PhaseAllocated, cardIdx).Obj())
	}
	return e, names
}

// reportCPU adds cpu-ns/op: the process's CPU time per call (GC included).
// On a shared machine ns/op also counts waiting for a core; run with -cpu 1
// for the one-core figure.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkFilter(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e, names := benchEnv(b, n)
			args := &extenderv1.ExtenderArgs{Pod: fixture.MakePod("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				// The HTTP handler's path: the answer before JSON encoding.
				res, err := e.srv.Filter(ctx, args)
				if err != nil || len(*res.NodeNames) == 0 {
					b.Fatalf("filter: %v %+v", err, res)
				}
			}
		})
	}
}

func BenchmarkPrioritize(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e, names := benchEnv(b, n)
			args := &extenderv1.ExtenderArgs{Pod: fixture.MakePod("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				res, err := e.srv.Prioritize(ctx, args)
				if err != nil || len(res) != n {
					b.Fatalf("prioritize: %v", err)
				}
			}
		})
	}
}

// BenchmarkFilterHTTP is BenchmarkFilter through the gin handler, JSON
// decoding and encoding included: what kube-scheduler waits for, less the
// network.
func BenchmarkFilterHTTP(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e, names := benchEnv(b, n)
			body := mustJSON(b, extenderv1.ExtenderArgs{Pod: fixture.MakePod("ns", "p").GPU("main", 10).Obj(), NodeNames: &names})
			h := e.srv.Handler(nil)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("POST", "/filter", strings.NewReader(body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkFilterPolicies is BenchmarkFilter and BenchmarkPrioritize at
// 5,000 nodes for every policy: the cost target (≤ 2 ms per call on one
// core, -cpu 1) holds for each policy the extender can run, not only the
// default.
func BenchmarkFilterPolicies(b *testing.B) {
	const n = 5000
	for _, policy := range allocator.Names() {
		for _, verb := range []string{"filter", "prioritize"} {
			b.Run(fmt.Sprintf("policy=%s/verb=%s/nodes=%d", policy, verb, n), func(b *testing.B) {
				e, names := benchEnvPolicy(b, n, policy)
				args := &extenderv1.ExtenderArgs{Pod: fixture.MakePod("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				defer func() { reportCPU(b, cpu0) }()
				for i := 0; i < b.N; i++ {
					if verb == "filter" {
						if res, err := e.srv.Filter(ctx, args); err != nil || len(*res.NodeNames) == 0 {
							b.Fatalf("filter: %v %+v", err, res)
						}
					} else if res, err := e.srv.Prioritize(ctx, args); err != nil || len(res) != n {
						b.Fatalf("prioritize: %v", err)
					}
				}
			})
		}
	}
}

// BenchmarkFilterHTTPConcurrent sends filter calls over real HTTP (loopback,
// a new request each, JSON both ways) from 16 concurrent callers and reports
// the latency percentiles a caller sees (p50-ms, p99-ms), queueing for the
// CPU included: run it with -cpu set to the cores the extender gets.
// BenchmarkFilterHTTPConcurrent: 16 callers post filter calls at once over
// loopback HTTP; p50-ms and p99-ms are the latencies they see. Without the
// memo every call evaluates every node. With it (memo=burst) each call
// follows one bind, as in a burst of pods created ahead of their
// scheduling: one pod already in the cache (its shape counted in the
// workload) is placed on a random node, so the memo misses that node only.
func BenchmarkFilterHTTPConcurrent(b *testing.B) {
	const callers = 16
	for _, memo := range []bool{false, true} {
		for _, n := range []int{1000, 5000} {
			name := fmt.Sprintf("callers=%d/nodes=%d", callers, n)
			if memo {
				name += "/memo=burst"
			}
			b.Run(name, func(b *testing.B) { benchFilterHTTPConcurrent(b, callers, n, memo) })
		}
	}
}

func benchFilterHTTPConcurrent(b *testing.B, callers, n int, memo bool) {
	var (
		e     *env
		names []string
		burst []*fixture.PodWrapper
	)
	if memo {
		e, names = benchEnvMemo(b, n, "binpack")
		rng := rand.New(rand.NewSource(2))
		for i := 0; i < b.N; i++ {
			p := fixture.MakePod("burst", fmt.Sprintf("b%06d", i)).GPU("main", 10)
			e.cache.SetPod(p.Obj()) // pending: counted in the workload
			burst = append(burst, p.Assign(names[rng.Intn(n)], api.PhaseAllocated, rng.Intn(benchCardsPerNode)))
		}
	} else {
		e, names = benchEnv(b, n)
	}
	body := mustJSON(b, extenderv1.ExtenderArgs{Pod: fixture.MakePod("ns", "p").GPU("main", 10).Obj(), NodeNames: &names})
	srv := httptest.NewServer(e.srv.Handler(nil))
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = callers
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if burst != nil {
					e.cache.SetPod(burst[i].Obj()) // the bind before this call
				}
				start := time.Now()
				resp, err := client.Post(srv.URL+"/filter", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}
