package server

import (
	"context"
	"fmt"
	"io"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	// Bind failures are logged at info level; keep test output readable.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// env is a server over a fake clientset and a cache fed directly.
type env struct {
	srv    *Server
	client *fake.Clientset
	cache  *cache.Cache
	reg    *prometheus.Registry
	// binds counts Bindings the fake API server accepted.
	mu    sync.Mutex
	binds map[string]string // pod name → node
}

type envOpts struct {
	policy string
	mode   FilterMode
	// wrap, when set, wraps the cache the server sees.
	wrap func(*cache.Cache) Cache
	// maxBody bounds request bodies (0: default).
	maxBody int64
	// unsynced leaves the cache unsynced (not ready).
	unsynced bool
	// writes, bindTimeout and clock go to Config (WriteLimiter,
	// BindTimeout, Clock).
	writes      *rate.Limiter
	bindTimeout time.Duration
	clock       clock.Clock
	// keys sign the records bind writes (Config.RecordKeys).
	keys api.RecordKeys
	// allowed names the policies pods may name (Config.AllowedPolicies).
	allowed []string
	// maxBest caps the tied best nodes (Config.MaxBestNodes).
	maxBest int
	// dra serves the DRA prioritize verb (Config.DRA).
	dra DRA
	// draUsage adds the DRA claims to /inspect (Config.DRAUsage).
	draUsage DRASource
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func newEnv(t testing.TB, o envOpts, nodes []*corev1.Node, pods ...*corev1.Pod) *env {
	t.Helper()
	if o.policy == "" {
		o.policy = "binpack"
	}
	objs := make([]runtime.Object, 0, len(nodes)+len(pods))
	for _, n := range nodes {
		objs = append(objs, n)
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	e := &env{client: fake.NewClientset(objs...), cache: cache.New(), reg: prometheus.NewRegistry(), binds: map[string]string{}}
	fixture.ServeBindings(e.client, func(pod *corev1.Pod) {
		e.mu.Lock()
		e.binds[pod.Name] = pod.Spec.NodeName
		e.mu.Unlock()
	})
	for _, n := range nodes {
		e.cache.SetNode(n)
	}
	for _, p := range pods {
		e.cache.SetPod(p)
	}
	if !o.unsynced {
		e.cache.MarkSynced()
	}
	pol, err := registry.Lookup(o.policy)
	if err != nil {
		t.Fatal(err)
	}
	var allowed []*allocator.Policy
	for _, name := range o.allowed {
		p, err := registry.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, p)
	}
	var c Cache = e.cache
	if o.wrap != nil {
		c = o.wrap(e.cache)
	}
	e.srv, err = New(Config{Cache: c, Client: e.client, Policy: pol, FilterMode: o.mode, Registry: e.reg, MaxBodyBytes: o.maxBody, MaxBestNodes: o.maxBest,
		WriteLimiter: o.writes, BindTimeout: o.bindTimeout, Clock: o.clock, RecordKeys: o.keys, AllowedPolicies: allowed, DRA: o.dra, DRAUsage: o.draUsage})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// apiPod reads a pod back from the fake API.
func (e *env) apiPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lastBinding returns the last Binding the server posted.
func (e *env) lastBinding(t testing.TB) *corev1.Binding {
	t.Helper()
	var b *corev1.Binding
	for _, a := range e.client.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && ca.GetSubresource() == "binding" {
			b = ca.GetObject().(*corev1.Binding)
		}
	}
	if b == nil {
		t.Fatal("no Binding was posted")
	}
	return b
}

// writes lists the API writes the server made (patches and bindings), as
// "verb resource/subresource name".
func (e *env) writes() []string {
	var out []string
	for _, a := range e.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		name := ""
		switch x := a.(type) {
		case k8stesting.PatchAction:
			name = x.GetName()
		case k8stesting.CreateAction:
			if b, ok := x.GetObject().(*corev1.Binding); ok {
				name = b.Name
			}
		}
		out = append(out, fmt.Sprintf("%s %s/%s %s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), name))
	}
	return out
}

// usedOn returns node's per-card used units by index.
func (e *env) usedOn(node string) map[int]int64 {
	out := map[int]int64{}
	for _, c := range e.cache.Inspect(node)[0].Cards {
		out[c.Index] = c.Used
	}
	return out
}

// assignment decodes the pod's assignment as the device plugin would.
func assignment(t testing.TB, pod *corev1.Pod) api.Assignment {
	t.Helper()
	a, err := api.DefaultNames().AssignmentFromPod(pod)
	if err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
	return a
}

// Filter is the filter verb without the decoder's candidates.
func (s *Server) Filter(ctx context.Context, args *extenderv1.ExtenderArgs) (*extenderv1.ExtenderFilterResult, error) {
	return s.filter(ctx, args, candidates{})
}

// Prioritize is the prioritize verb without the decoder's candidates.
func (s *Server) Prioritize(ctx context.Context, args *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	return s.prioritize(ctx, args, candidates{})
}
