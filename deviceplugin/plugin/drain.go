package plugin

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// drainQuiet is how long no call may have been in flight before a draining endpoint closes: a
// call the kubelet sent just before it switched to the new plugin arrives within it.
const drainQuiet = 200 * time.Millisecond

// drainMargin is added to Config.AllocateWait for the longest a drain waits: an Allocate waits
// at most AllocateWait for its pod to reach the cache, then answers within a round trip.
const drainMargin = 5 * time.Second

// CallLimit is the longest a kubelet call to the plugin takes, so the longest a stopping endpoint
// waits for its calls in flight. The chart's termination grace (30 s) must exceed it.
func (p *Plugin) CallLimit() time.Duration { return p.cfg.AllocateWait + drainMargin }

// inFlight counts an endpoint's unary calls (GetPreferredAllocation, Allocate,
// PreStartContainer, the options) while they run.
//
// Why a stopping plugin drains: the kubelet sends each admission's calls to the endpoint it
// holds when the admission starts. When a DaemonSet rolling update starts the new plugin beside
// the old one (kubelet 1.37+, one endpoint per socket), calls that began before the new plugin
// registered may still be running in the old one when it is told to stop; closing the server
// then fails them ("rpc error: code = Unavailable ... EOF") and, once ListAndWatch ends, the
// kubelet closes the connection under any still running ("Canceled ... client connection is
// closing"): the pod is Failed with UnexpectedAdmissionError. A drain keeps ListAndWatch open
// and answers them (and, on a kubelet that has no other endpoint, the calls that still arrive)
// before the server closes.
type inFlight struct {
	mu   sync.Mutex
	n    int
	last time.Time // when the last call ended
}

// count is the server's unary interceptor.
func (f *inFlight) count(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.n--
		f.last = time.Now()
		f.mu.Unlock()
	}()
	return handler(ctx, req)
}

// idleFor is how long no call has been in flight (0 while one is), counting from since at most.
func (f *inFlight) idleFor(now, since time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n > 0 {
		return 0
	}
	return now.Sub(later(f.last, since))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// drain returns once no call has been in flight for quiet (counted from the drain's start at
// the earliest), or after limit.
func (f *inFlight) drain(limit, quiet time.Duration) {
	start := time.Now()
	deadline := start.Add(limit)
	for {
		now := time.Now()
		idle := f.idleFor(now, start)
		if idle >= quiet || !now.Before(deadline) {
			return
		}
		wait := min(quiet-idle, deadline.Sub(now))
		if idle == 0 {
			wait = min(10*time.Millisecond, wait)
		}
		time.Sleep(wait)
	}
}
