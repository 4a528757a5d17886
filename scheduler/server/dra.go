package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gin-gonic/gin"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/frag"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// DRA is what the DRA prioritize verb reads: pods that ask for GPU memory
// through ResourceClaims of the gpushare DeviceClass, and the cards of the
// nodes the DRA driver serves, as allocated claims use them.
type DRA interface {
	// Request is the pod's demand through its claims (a share of one card
	// per device it asks for); false when it asks for none.
	Request(pod *corev1.Pod) (allocator.Request, bool, error)
	// Nodes are the named nodes' cards, free memory counted from the
	// allocated claims; nil for a node the driver publishes no card of.
	Nodes(names []string) []*allocator.Node
}

var _ DRA = (*cache.DRA)(nil)

// draPolicy scores nodes for DRA pods: frag after the DRA allocator's
// first-fit card (frag.DRA).
var draPolicy = frag.DRA()

// PrioritizeDRA implements the DRA prioritize verb (/dra/prioritize,
// a second extender of kube-scheduler's configuration, docs/dra.md): for a
// pod that asks for GPU memory through claims, each node scored as frag
// scores it once the DRA allocator placed the pod's claims on its first
// cards that fit, rescaled to 0..MaxExtenderPriority; kube-scheduler's DRA
// plugin still filters the nodes and picks the devices. Every other pod,
// and a node the driver serves no card of, scores 0.
func (s *Server) PrioritizeDRA(ctx context.Context, args *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	defer s.metrics.observe("dra-prioritize", s.clock, s.clock.Now())
	names, err := s.checkArgs(args)
	if err != nil {
		return nil, err
	}
	out := zeroScores(names)
	if !s.scoresDRA(args.Pod) {
		return out, nil
	}
	req, ok, err := s.dra.Request(args.Pod)
	if err != nil || !ok {
		return out, nil // kube-scheduler's DRA plugin reports what is wrong with the claims
	}
	nodes := s.dra.Nodes(names)
	decisions := make([]allocator.Decision, len(names))
	if !draPolicy.EvaluateParallelUntil(ctx.Done(), nodes, req, s.cache.Workload(), decisions, s.workers) {
		return nil, fmt.Errorf("evaluating %d nodes: stopped, the request ended: %w", len(names), context.Cause(ctx))
	}
	for i, sc := range allocator.ExtenderScores(decisions, extenderv1.MaxExtenderPriority) {
		out[i].Score = sc
	}
	return out, nil
}

// scoresDRA reports whether the DRA verb scores pod: it has claims and the
// server a DRA view.
func (s *Server) scoresDRA(pod *corev1.Pod) bool {
	return s.dra != nil && len(pod.Spec.ResourceClaims) > 0
}

// draArgs is ExtenderArgs with the candidates left undecoded: most pods
// kube-scheduler sends the DRA verb have no claims, and for them the
// thousands of node names are skipped, not read.
type draArgs struct {
	Pod       *corev1.Pod
	Nodes     json.RawMessage
	NodeNames json.RawMessage
}

// serveDRA answers POST /dra/prioritize: an empty list (every node 0) for
// a pod the verb does not score, without reading the candidates.
func (s *Server) serveDRA(c *gin.Context) {
	var raw draArgs
	if err := s.decode(c, &raw); err != nil {
		respond(c, nil, err)
		return
	}
	if raw.Pod == nil {
		respond(c, nil, fmt.Errorf("%w: Pod is missing", ErrBadRequest))
		return
	}
	if !s.scoresDRA(raw.Pod) {
		respond(c, extenderv1.HostPriorityList{}, nil)
		return
	}
	args := extenderv1.ExtenderArgs{Pod: raw.Pod}
	for _, f := range []struct {
		raw json.RawMessage
		v   any
	}{{raw.NodeNames, &args.NodeNames}, {raw.Nodes, &args.Nodes}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		if err := json.Unmarshal(f.raw, f.v); err != nil {
			respond(c, nil, fmt.Errorf("%w: malformed JSON: %v", ErrBadRequest, err))
			return
		}
	}
	res, err := s.PrioritizeDRA(c.Request.Context(), &args)
	respond(c, res, err)
}
