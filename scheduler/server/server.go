// Package server is the extender's HTTP face: the kube-scheduler extender
// verbs (POST /filter, /prioritize, /bind with k8s.io/kube-scheduler/extender/v1
// types), GET /inspect for people and tools, health and readiness probes and
// Prometheus metrics.
//
// The verbs are plain methods on Server (Filter, Prioritize, Bind) so tests
// can call them directly; Handler wraps them in gin routes. The placement
// decision itself belongs to package allocator: filter and prioritize
// evaluate the policy per candidate node on a cache snapshot, bind decides
// again on the node's current snapshot under the cache's assume protocol.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/oneof"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// FilterMode says which fitting nodes the filter verb lets through.
type FilterMode string

const (
	// FilterBest keeps only the fitting nodes with the policy's best score,
	// so kube-scheduler can only pick a node the policy prefers. Other
	// fitting nodes are reported failed with a message naming the policy.
	FilterBest FilterMode = "best"
	// FilterAll keeps every fitting node and leaves the choice to
	// prioritize (and the extender's weight in kube-scheduler's config).
	FilterAll FilterMode = "all"
)

// FilterModes lists the valid modes.
var FilterModes = []FilterMode{FilterBest, FilterAll}

// ParseFilterMode returns the mode named s, or an error listing the valid ones.
func ParseFilterMode(s string) (FilterMode, error) {
	return oneof.Parse("filter mode", s, FilterModes...)
}

// Cache is what the server needs from the cluster view (package cache
// implements it).
type Cache interface {
	// SnapshotInto is Snapshot into dst's array when it has room.
	SnapshotInto(dst []*allocator.Node, names []string) []*allocator.Node
	// SnapshotsOf is SnapshotInto for names as bytes (name(i)), with the
	// known nodes' names and IDs.
	SnapshotsOf(snaps []*allocator.Node, names []string, ids []int32, name func(i int) []byte)
	NodeSnapshot(name string) (*allocator.Node, error)
	Workload() *allocator.Workload
	Assume(pod *corev1.Pod, req api.PodRequest, a api.Assignment, basis *allocator.Node) error
	Forget(uid types.UID)
	FinishBinding(uid types.UID)
	Reserve(uid types.UID, ttl time.Duration) bool
	Claim(uid types.UID, node string) (api.Assignment, bool)
	Unreserve(uid types.UID) bool
	Inspect(names ...string) []api.ExtenderNode
	// Residents lists the pods holding units on a node's cards (the
	// preempt verb).
	Residents(node string) ([]cache.Resident, *allocator.Node)
	Nodes() []*allocator.Node
	Synced() bool
}

var _ Cache = (*cache.Cache)(nil)

// Config holds the server's dependencies.
type Config struct {
	Cache Cache
	// Names are the resource names and keys pods are read and records
	// written with (zero: api.DefaultNames).
	Names api.Names
	// Client reads pods the informer has not delivered yet, and writes
	// Bindings unless BindClient is set.
	Client kubernetes.Interface
	// BindClient, when set, writes the Bindings. Its own client-side rate
	// limit should be off: WriteLimiter admits its writes, with a deadline.
	BindClient kubernetes.Interface
	// WriteLimiter is the API write budget a Binding takes its token from
	// (nil: no limit). A bind whose token would come too late to finish
	// within BindTimeout fails at once instead of waiting.
	WriteLimiter *rate.Limiter
	// BindTimeout bounds one bind verb call, queueing for WriteLimiter
	// included; keep it below kube-scheduler's extender httpTimeout.
	// 0 means DefaultBindTimeout.
	BindTimeout time.Duration
	// Clock is the bind path's clock (nil: the real one).
	Clock clock.Clock
	// RecordKeys sign every record bind writes, with the key in force at
	// the bind (nil: unsigned).
	RecordKeys api.RecordKeyring
	// Pods, when set, is read before the API for the pod bind names, and by
	// the preempt verb and its promises (without it the verb evicts nothing).
	Pods corelisters.PodLister
	// PDBs, when set, are the PodDisruptionBudgets the preempt verb honours.
	PDBs policylisters.PodDisruptionBudgetLister
	// Policy decides; FilterMode says what filter lets through.
	Policy     *allocator.Policy
	FilterMode FilterMode
	// AllowedPolicies are the policies a pod may name in its
	// api.Names.AnnotationPolicy annotation; Policy is always allowed, and a pod
	// that names none runs under it.
	AllowedPolicies []*allocator.Policy
	// Registry receives the server's metrics; nil registers none.
	Registry prometheus.Registerer
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Parallelism is how many goroutines evaluate the nodes of one filter or
	// prioritize call (allocator.EvaluateParallel); 0 or 1: one.
	Parallelism int
	// MaxBestNodes caps, in best mode, how many of the nodes tied for the
	// policy's best score filter keeps: more are sampled at random down to
	// this many (0: no cap). See DefaultMaxBestNodes.
	MaxBestNodes int
	// DRA, when set, serves the DRA prioritize verb (dra.go).
	DRA DRA
	// DRAUsage, when set, adds the DRA driver's claims to /inspect.
	DRAUsage DRASource
}

// DefaultMaxBestNodes is the cap on tied best nodes the extender's command
// uses. When many nodes tie for best (spread, fgd and every policy on an
// empty fleet leave hundreds tied), kube-scheduler scores every one it is
// given and calls prioritize with all of them: at 1,000 nodes that is a
// second pass as costly as the filter. The tied nodes are equally good for
// the policy; a random 16 leaves kube-scheduler's own scores (CPU and
// memory balance, soft affinities, topology spread) a choice, as its own
// percentageOfNodesToScore sample does, for a fraction of the cost.
const DefaultMaxBestNodes = 16

// DefaultBindTimeout bounds a bind verb call: below the 5 s extender
// httpTimeout the chart gives kube-scheduler (and the 10 s of
// scheduler/config), so a bind answers before kube-scheduler gives up.
const DefaultBindTimeout = 4 * time.Second

// Server implements the extender verbs.
type Server struct {
	names       api.Names
	cache       Cache
	client      kubernetes.Interface
	bindClient  kubernetes.Interface
	writes      *rate.Limiter
	bindTimeout time.Duration
	clock       clock.Clock
	pods        corelisters.PodLister
	pdbs        policylisters.PodDisruptionBudgetLister
	// promises keeps the cards preemptions free for their preemptors
	// (promise.go).
	promises   promises
	policy     *allocator.Policy
	mode       FilterMode
	maxBody    int64
	metrics    *metrics
	recordKeys api.RecordKeyring
	workers    int
	maxBest    int
	// decisionPool, snapPool and idPool recycle the per-call decision,
	// snapshot and node ID slices.
	decisionPool slicePool[allocator.Decision]
	snapPool     slicePool[*allocator.Node]
	idPool       slicePool[int32]
	// memo keeps recent calls' decisions (memo.go); nil: every node is
	// evaluated on every call.
	memo *evalMemo
	// allowed are the policies a pod may name (AllowedPolicies and Policy).
	allowed allowedPolicies
	// dra is the DRA prioritize verb's view (nil: it scores nothing).
	dra DRA
	// draUsage adds the DRA claims to /inspect (inspectdra.go; nil: none).
	draUsage DRASource
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Cache == nil:
		return nil, errors.New("server: no cache")
	case cfg.Client == nil:
		return nil, errors.New("server: no Kubernetes client")
	case cfg.Policy == nil:
		return nil, errors.New("server: no policy")
	case slices.Contains(cfg.AllowedPolicies, nil):
		return nil, errors.New("server: a nil allowed policy")
	}
	cfg.FilterMode = cmp.Or(cfg.FilterMode, FilterBest)
	if _, err := ParseFilterMode(string(cfg.FilterMode)); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	m, err := newMetrics(cfg.Registry, cfg.Cache)
	if err != nil {
		return nil, err
	}
	if cfg.Parallelism < 0 {
		return nil, fmt.Errorf("server: parallelism %d is negative", cfg.Parallelism)
	}
	if cfg.MaxBestNodes < 0 {
		return nil, fmt.Errorf("server: max best nodes %d is negative (0 means no cap)", cfg.MaxBestNodes)
	}
	cfg.BindTimeout = cmp.Or(cfg.BindTimeout, DefaultBindTimeout)
	if cfg.BindTimeout <= bindWriteAllowance {
		return nil, fmt.Errorf("server: bind timeout %v leaves no time to queue for the API (it must exceed %v)", cfg.BindTimeout, bindWriteAllowance)
	}
	return &Server{
		names:       cfg.Names.OrDefault(),
		bindClient:  cmp.Or(cfg.BindClient, cfg.Client),
		writes:      cfg.WriteLimiter,
		bindTimeout: cfg.BindTimeout,
		clock:       cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{}),
		workers:     cfg.Parallelism,
		maxBest:     cfg.MaxBestNodes,
		cache:       cfg.Cache,
		client:      cfg.Client,
		pods:        cfg.Pods,
		pdbs:        cfg.PDBs,
		policy:      cfg.Policy,
		mode:        cfg.FilterMode,
		maxBody:     cfg.MaxBodyBytes,
		metrics:     m,
		allowed:     newAllowedPolicies(cfg.Policy, cfg.AllowedPolicies),
		recordKeys:  cfg.RecordKeys,
		memo:        &evalMemo{},
		dra:         cfg.DRA,
		draUsage:    cfg.DRAUsage,
	}, nil
}

// Errors that decide the HTTP status (see httpStatus).
var (
	// ErrBadRequest: the request body is malformed or misses a field.
	ErrBadRequest = errors.New("bad request")
	// ErrNotReady: the cache has not synced yet.
	ErrNotReady = errors.New("the gpushare extender's cache has not synced yet")
	// ErrNotFound: an inspected node is not in the cache.
	ErrNotFound = errors.New("not found")
)

// reasonUnknownNode marks a candidate node the cache does not know.
const reasonUnknownNode allocator.ReasonCode = "UnknownNode"

// unresolvable reports whether preemption on the node could never make the
// pod fit: the node has no usable inventory, no schedulable card, no card
// large enough, or is unknown. Only full cards (InsufficientFree,
// NotEnoughWholeCards) are resolvable.
func unresolvable(d allocator.Decision) bool {
	for _, r := range d.Reasons {
		switch r.Code {
		case allocator.ReasonInsufficientFree, allocator.ReasonNotEnoughWholeCards:
		default:
			return true
		}
	}
	return false
}

// checkArgs returns the candidate node names of a filter or prioritize
// call, or why the call cannot be answered: a malformed body
// (ErrBadRequest), or a cache that has not synced yet (ErrNotReady).
func (s *Server) checkArgs(args *extenderv1.ExtenderArgs) ([]string, error) {
	if args == nil {
		return nil, fmt.Errorf("%w: empty body", ErrBadRequest)
	}
	if args.Pod == nil {
		return nil, fmt.Errorf("%w: Pod is missing", ErrBadRequest)
	}
	names, err := candidateNames(args)
	if err != nil {
		return nil, err
	}
	if !s.cache.Synced() {
		return nil, ErrNotReady
	}
	return names, nil
}

// evaluate runs the pod's policy (its api.Names.AnnotationPolicy, else the
// default) on every candidate node. ok is false when the pod asks for no
// gpu-mem; reqErr is set when its demand is invalid (or over
// MaxGPUContainers), or its card choice or policy cannot be used. err is
// set, and decisions are nil, when ctx ended before every node was
// evaluated: kube-scheduler no longer waits for the answer. cands, if not
// zero, are the names resolved by the decoder in this call; the caller
// keeps them.
func (s *Server) evaluate(ctx context.Context, pod *corev1.Pod, names []string, cands candidates) (decisions []allocator.Decision, pp podPolicy, ok bool, reqErr, err error) {
	preq, err := s.names.RequestFromPod(pod)
	if err == nil {
		err = errTooManyContainers(s.names, preq)
	}
	if err != nil {
		return nil, pp, true, err, nil
	}
	if preq.Empty() {
		return nil, pp, false, nil, nil
	}
	w := s.cache.Workload()
	in, err := s.podInput(preq, w)
	if err != nil {
		return nil, pp, true, err, nil
	}
	snaps, ids := cands.snaps, cands.ids
	if len(snaps) != len(names) || len(ids) != len(names) {
		snaps, ids = s.cache.SnapshotInto(s.snapPool.get(len(names)), names), nil
		defer s.snapPool.put(snaps)
	}
	snaps = s.promised(pod, names, snaps)
	decisions = s.getDecisions(len(names))
	var complete bool
	if k, memo := memoKeyFor(in.policy.policy, w, preq, len(names)); memo && s.memo != nil {
		var evaluated, reused int
		complete, evaluated, reused = s.evaluateMemo(ctx.Done(), k, in, w, snaps, ids, decisions)
		s.metrics.evaluations(evaluated, reused)
	} else {
		complete = in.policy.policy.EvaluateParallelUntil(ctx.Done(), snaps, in.req, w, decisions, s.workers)
		s.metrics.evaluations(countNodes(snaps), 0)
	}
	if !complete {
		s.putDecisions(decisions)
		return nil, pp, true, nil, fmt.Errorf("evaluating %d nodes: stopped, the request ended: %w", len(names), context.Cause(ctx))
	}
	for i, n := range snaps {
		if n == nil {
			decisions[i] = allocator.Decision{Node: names[i], Reasons: []allocator.Reason{{Code: reasonUnknownNode,
				Message: fmt.Sprintf("%v: %s", cache.ErrUnknownNode, names[i])}}}
		}
	}
	return decisions, in.policy, true, nil, nil
}

// getDecisions returns a zeroed slice of n decisions, reused between calls
// (at 5,000 nodes it is 400 kB a call); putDecisions hands it back once the
// response no longer refers to it.
func (s *Server) getDecisions(n int) []allocator.Decision { return s.decisionPool.get(n) }

func (s *Server) putDecisions(d []allocator.Decision) { s.decisionPool.put(d) }

// filter implements the filter verb, with the candidates as the decoder
// resolved them (decodeArgs), if it did. Pods that ask for no gpu-mem pass on
// every node; a pod whose demand is invalid (e.g. an init container asks for
// gpu-mem) fails every node, unresolvably, with the reason.
//
// In best mode the answer keeps the policy's best nodes and lists only the
// nodes that do not fit as failed: a fitting node that is not best is in
// neither list. kube-scheduler reads the failed lists only when no node is
// left after the extenders (the pod's FailedScheduling reasons, and
// preemption); a pod with a best node is never in that case, so listing the
// thousands of other fitting nodes as "failed" only cost both sides
// encoding, decoding and a status per node (docs/design.md, "Scheduling
// throughput").
func (s *Server) filter(ctx context.Context, args *extenderv1.ExtenderArgs, cands candidates) (*extenderv1.ExtenderFilterResult, error) {
	defer s.metrics.observe("filter", s.clock, s.clock.Now())
	names, err := s.checkArgs(args)
	if err != nil {
		return nil, err
	}
	if args.Pod != nil && s.cache.Unreserve(args.Pod.UID) {
		cands = candidates{} // filtered again, so not bound where it was reserved: fresh snapshots
	}
	decisions, _, interested, reqErr, err := s.evaluate(ctx, args.Pod, names, cands)
	if err != nil {
		return nil, err
	}
	defer s.putDecisions(decisions)
	if !interested {
		return &extenderv1.ExtenderFilterResult{Nodes: args.Nodes, NodeNames: args.NodeNames}, nil
	}
	res := &extenderv1.ExtenderFilterResult{
		FailedNodes:                extenderv1.FailedNodesMap{},
		FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{},
	}
	// kept are the positions of the nodes the answer keeps, ascending.
	var kept []int
	if reqErr != nil {
		msg := clipReason(reqErr.Error())
		for _, n := range names {
			res.FailedAndUnresolvableNodes[n] = msg
		}
	} else {
		var best []int
		if s.mode == FilterBest {
			best = sample(allocator.BestNodes(decisions), s.maxBest)
		} else {
			for i, d := range decisions {
				if d.Fits {
					best = append(best, i)
				}
			}
		}
		kept = best
		if s.mode == FilterBest && len(kept) == 1 {
			s.reserve(args.Pod, names[kept[0]])
		}
		for _, d := range decisions {
			switch {
			case d.Fits:
				// Kept, or (best mode) fits but is not best: left out of
				// both lists, see above.
			case unresolvable(d):
				res.FailedAndUnresolvableNodes[d.Node] = clipReason(d.Message())
			default:
				res.FailedNodes[d.Node] = clipReason(d.Message())
			}
		}
	}
	if args.NodeNames != nil {
		out := make([]string, 0, len(kept))
		for _, i := range kept {
			out = append(out, names[i])
		}
		res.NodeNames = &out
	} else {
		out := &corev1.NodeList{Items: make([]corev1.Node, 0, len(kept))}
		for _, i := range kept {
			out.Items = append(out.Items, args.Nodes.Items[i])
		}
		res.Nodes = out
	}
	return res, nil
}

// sample returns k of idx chosen at random, in idx's order (idx itself when
// k is 0 or idx has at most k). It reorders idx.
func sample(idx []int, k int) []int {
	if k <= 0 || len(idx) <= k {
		return idx
	}
	for i := 0; i < k; i++ {
		j := i + rand.IntN(len(idx)-i)
		idx[i], idx[j] = idx[j], idx[i]
	}
	idx = idx[:k]
	slices.Sort(idx)
	return idx
}

// prioritize implements the prioritize verb, with the candidates as the
// decoder resolved them, if it did: the policy's node scores rescaled to
// 0..MaxExtenderPriority (allocator.ExtenderScores); nodes that do not fit,
// and every node for a pod that asks for no (or an invalid) gpu-mem demand,
// score 0.
func (s *Server) prioritize(ctx context.Context, args *extenderv1.ExtenderArgs, cands candidates) (extenderv1.HostPriorityList, error) {
	defer s.metrics.observe("prioritize", s.clock, s.clock.Now())
	names, err := s.checkArgs(args)
	if err != nil {
		return nil, err
	}
	out := zeroScores(names)
	if args.Pod != nil && s.cache.Unreserve(args.Pod.UID) {
		cands = candidates{} // a pod being scored is not bound yet: fresh snapshots
	}
	decisions, _, interested, reqErr, err := s.evaluate(ctx, args.Pod, names, cands)
	if err != nil {
		return nil, err
	}
	defer s.putDecisions(decisions)
	if !interested || reqErr != nil {
		return out, nil
	}
	for i, sc := range allocator.ExtenderScores(decisions, extenderv1.MaxExtenderPriority) {
		out[i].Score = sc
	}
	return out, nil
}
