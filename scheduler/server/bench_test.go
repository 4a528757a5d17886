package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
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
		e.cache.SetPod(podtest.Make("bench", fmt.Sprintf("p%05d", i)).GPU("main", units).AssignOn(node, api.PhaseAllocated, cardIdx).Obj())
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
			args := &extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
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
			args := &extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
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
			body := mustJSON(b, extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", 10).Obj(), NodeNames: &names})
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
	for _, policy := range registry.Names() {
		for _, verb := range []string{"filter", "prioritize"} {
			b.Run(fmt.Sprintf("policy=%s/verb=%s/nodes=%d", policy, verb, n), func(b *testing.B) {
				e, names := benchEnvPolicy(b, n, policy)
				args := &extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", 10).Obj(), NodeNames: &names}
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

// BenchmarkFilterHTTPConcurrent: 16 callers post filter calls at once over
// loopback HTTP (a new request each, JSON both ways) and report the
// latencies they see (p50-ms, p99-ms), queueing for the CPU included: run it
// with -cpu set to the cores the extender gets, and the CPU time a call
// takes (cpu-ns/op: the extender's and the callers', which share the
// process). Without the memo every call
// evaluates every node. With it (memo=burst) each call follows one bind, as
// in a burst of pods created ahead of their scheduling: one pod already in
// the cache (its shape counted in the workload) is placed on a random node,
// so the memo misses that node only.
//
// The callers are kube-scheduler, which runs in its own process. client=go
// posts with net/http's client, in this process: its garbage (a 32 kB copy
// buffer a request, to send a 100 kB body) is collected by the extender's
// GC, which kube-scheduler's never is. client=lean writes each request on a
// kept connection from bytes built once and reads the answer into a
// reused buffer: the CPU the callers take still competes with the
// extender's, their garbage no longer does.
//
// gogc=400 runs the 5,000-node cases under the chart's GC target
// (scheduler.extender.gcPercent, docs/operations.md); the others run under
// the process's (Go's default 100 unless GOGC says otherwise).
//
// binpack runs every case; under the shipped settings (5,000 nodes,
// client=lean, gogc=400) every policy runs when every node is evaluated,
// and the default policy (frag) with the memo=burst memo too.
func BenchmarkFilterHTTPConcurrent(b *testing.B) {
	const callers = 16
	for _, memo := range []string{"", "burst", "mixed"} {
		for _, n := range []int{1000, 5000} {
			for _, client := range []string{"go", "lean"} {
				for _, gogc := range []int{0, 400} {
					for _, policy := range registry.Names() {
						if gogc != 0 && n < 5000 || memo == "mixed" && (n < 5000 || client == "go") {
							continue
						}
						shipped := n == 5000 && client == "lean" && gogc == 400
						if policy != "binpack" && !(shipped && (memo == "" || memo == "burst" && policy == registry.Default)) {
							continue
						}
						name := fmt.Sprintf("callers=%d/nodes=%d", callers, n)
						if memo != "" {
							name += "/memo=" + memo
						}
						name += "/client=" + client
						if gogc != 0 {
							name += fmt.Sprintf("/gogc=%d", gogc)
						}
						if policy != "binpack" {
							name += "/policy=" + policy
						}
						b.Run(name, func(b *testing.B) {
							if gogc != 0 {
								defer debug.SetGCPercent(debug.SetGCPercent(gogc))
							}
							benchFilterHTTPConcurrent(b, callers, n, memo, policy, client == "lean")
						})
					}
				}
			}
		}
	}
}

// memo=mixed is memo=burst with pods of 16 sizes (1 to 16 GiB) in turn, as
// in a burst of mixed pods: each size is its own memo key.
func benchFilterHTTPConcurrent(b *testing.B, callers, n int, memo, policy string, lean bool) {
	var (
		e     *env
		names []string
		burst []*podtest.Builder
	)
	sizes := 1
	if memo == "mixed" {
		sizes = 16
	}
	size := func(i int) int64 {
		if sizes == 1 {
			return 10
		}
		return int64(1 + i%sizes)
	}
	if memo != "" {
		e, names = benchEnvMemo(b, n, policy)
		rng := rand.New(rand.NewSource(2))
		for i := 0; i < b.N; i++ {
			p := podtest.Make("burst", fmt.Sprintf("b%06d", i)).GPU("main", size(i))
			e.cache.SetPod(p.Obj()) // pending: counted in the workload
			burst = append(burst, p.AssignOn(names[rng.Intn(n)], api.PhaseAllocated, rng.Intn(benchCardsPerNode)))
		}
	} else {
		e, names = benchEnvPolicy(b, n, policy)
	}
	bodies := make([]string, sizes)
	for k := range bodies {
		bodies[k] = mustJSON(b, extenderv1.ExtenderArgs{Pod: podtest.Make("ns", "p").GPU("main", size(k)).Obj(), NodeNames: &names})
	}
	srv := httptest.NewServer(e.srv.Handler(nil))
	defer srv.Close()
	newCaller := goCaller(b, srv, bodies, callers)
	if lean {
		newCaller = leanCaller(b, srv, bodies)
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := processCPU()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post := newCaller()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if burst != nil {
					e.cache.SetPod(burst[i].Obj()) // the bind before this call
				}
				start := time.Now()
				if err := post(int(i) % sizes); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportCPU(b, cpu0)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}

// goCaller returns callers that post bodies[k] to srv's /filter with
// net/http's client and check the status.
func goCaller(b *testing.B, srv *httptest.Server, bodies []string, callers int) func() func(k int) error {
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = callers
	return func() func(k int) error {
		return func(k int) error {
			resp, err := client.Post(srv.URL+"/filter", "application/json", strings.NewReader(bodies[k]))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
}

// leanCaller returns callers that each keep one connection to srv, write
// the request bytes of bodies[k] on it (built once) and read the answer by
// hand: status line, headers, Content-Length bytes of body, into reused
// buffers.
func leanCaller(b *testing.B, srv *httptest.Server, bodies []string) func() func(k int) error {
	reqs := make([][]byte, len(bodies))
	for k, body := range bodies {
		reqs[k] = []byte(fmt.Sprintf("POST /filter HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			srv.Listener.Addr(), len(body), body))
	}
	return func() func(k int) error {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		r := bufio.NewReaderSize(conn, 64<<10)
		return func(k int) error {
			if _, err := conn.Write(reqs[k]); err != nil {
				return err
			}
			status, err := r.ReadSlice('\n')
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(status, []byte("HTTP/1.1 200 ")) {
				return fmt.Errorf("status line %q", status)
			}
			length, chunked := -1, false
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(line) <= 2 { // the blank line after the headers
					break
				}
				k, v, ok := bytes.Cut(line, []byte(":"))
				switch {
				case !ok:
				case bytes.EqualFold(k, []byte("Content-Length")):
					if length, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
						return fmt.Errorf("Content-Length %q", v)
					}
				case bytes.EqualFold(k, []byte("Transfer-Encoding")):
					chunked = bytes.EqualFold(bytes.TrimSpace(v), []byte("chunked"))
				}
			}
			switch {
			case chunked:
				return discardChunks(r)
			case length < 0:
				return errors.New("an answer without Content-Length")
			}
			_, err = r.Discard(length)
			return err
		}
	}
}

// discardChunks reads a chunked body (an answer larger than the server's
// response buffer, e.g. filter's when thousands of nodes tie): chunks of a
// hexadecimal size line, the bytes and CRLF, up to the chunk of size 0 and
// the blank line after it.
func discardChunks(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil {
			return fmt.Errorf("chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, then the blank line
				if line, err = r.ReadSlice('\n'); err != nil || len(line) <= 2 {
					return err
				}
			}
		}
		if _, err := r.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}
