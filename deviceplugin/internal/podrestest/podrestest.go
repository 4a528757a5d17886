// Package podrestest serves a kubelet PodResources v1 API on a unix socket
// for the device plugin's tests: what each container holds is set by the
// test, and every call is counted, so that a test can prove the plugin never
// calls List (which, in kubelet v1.34, drops the reservation of an
// allocation in flight: kubernetes/kubernetes#137534).
package podrestest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Server is a fake kubelet PodResources server.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	// Socket is the unix socket it listens on.
	Socket   string
	resource string

	mu          sync.Mutex
	held        map[string]map[string][]string // "ns/name" → container → device IDs
	list        int
	get         int
	getDisabled bool
	limit       *rate.Limiter
	// AfterGet, if set, is called after each Get is answered (outside the server's lock).
	AfterGet func(namespace, name string)
}

// Start serves on a new socket in a temporary directory until the test ends.
// resource is the resource name the held device IDs are reported under.
func Start(t testing.TB, resource string) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Socket: filepath.Join(dir, "kubelet.sock"), resource: resource, held: map[string]map[string][]string{}}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(func() {
		g.Stop()
		_ = os.RemoveAll(dir)
	})
	return s
}

// Hold records that the container of pod namespace/name holds ids.
func (s *Server) Hold(namespace, name, container string, ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := namespace + "/" + name
	if s.held[k] == nil {
		s.held[k] = map[string][]string{}
	}
	s.held[k][container] = append([]string(nil), ids...)
}

// Know records that the kubelet knows pod namespace/name (its pod manager
// has it) while its containers hold nothing: the pod it is admitting.
func (s *Server) Know(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := namespace + "/" + name; s.held[k] == nil {
		s.held[k] = map[string][]string{}
	}
}

// DisableGet makes Get fail as it does on a kubelet with the
// KubeletPodResourcesGet feature gate off.
func (s *Server) DisableGet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.getDisabled = true
}

// LimitRate makes the server refuse calls beyond qps (burst burst) with
// ResourceExhausted, as the kubelet's PodResources server does (its
// defaults: 100 and 10).
func (s *Server) LimitRate(qps float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = rate.NewLimiter(rate.Limit(qps), burst)
}

// Calls returns how many List and Get calls the server answered.
func (s *Server) Calls() (list, get int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list, s.get
}

func (s *Server) podLocked(key string) *podresourcesv1.PodResources {
	ns, name, _ := strings.Cut(key, "/")
	pr := &podresourcesv1.PodResources{Namespace: ns, Name: name}
	for c, ids := range s.held[key] {
		pr.Containers = append(pr.Containers, &podresourcesv1.ContainerResources{
			Name:    c,
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: s.resource, DeviceIds: ids}},
		})
	}
	return pr
}

// List implements the PodResources API (and counts the call).
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list++
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for k := range s.held {
		resp.PodResources = append(resp.PodResources, s.podLocked(k))
	}
	return resp, nil
}

// Get implements the PodResources API (and counts the call); its errors are
// the kubelet's own (pkg/kubelet/apis/podresources/server_v1.go).
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	if s.AfterGet != nil {
		defer s.AfterGet(req.GetPodNamespace(), req.GetPodName())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get++
	if s.limit != nil && !s.limit.Allow() {
		return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
	}
	if s.getDisabled {
		return nil, fmt.Errorf("PodResources API Get method disabled")
	}
	k := req.GetPodNamespace() + "/" + req.GetPodName()
	if _, ok := s.held[k]; !ok {
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podLocked(k)}, nil
}

// Forget removes pod namespace/name from the kubelet's pod manager: deleted,
// its devices released.
func (s *Server) Forget(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, namespace+"/"+name)
}
