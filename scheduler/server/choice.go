package server

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// ErrPolicyNotAllowed is the pod-side error (wrapped) of a pod whose
// api.Names.AnnotationPolicy names a policy the extender does not know or its
// operator does not allow (--allowed-policies). Such a pod fails every
// node, unresolvably, with the message.
var ErrPolicyNotAllowed = errors.New("policy not allowed")

// podPolicy is one policy a pod may run under.
type podPolicy struct {
	policy *allocator.Policy
}

func newPodPolicy(p *allocator.Policy) podPolicy { return podPolicy{policy: p} }

// allowedPolicies are the policies pods may name: the default and the
// operator's --allowed-policies.
type allowedPolicies struct {
	byName map[string]podPolicy
	// names lists them, sorted, for messages.
	names string
}

func newAllowedPolicies(def *allocator.Policy, allowed []*allocator.Policy) allowedPolicies {
	ps := allowedPolicies{byName: map[string]podPolicy{def.Name: newPodPolicy(def)}}
	for _, p := range allowed {
		ps.byName[p.Name] = newPodPolicy(p)
	}
	ps.names = strings.Join(slices.Sorted(maps.Keys(ps.byName)), ", ")
	return ps
}

// policyFor returns the policy the pod's request names (its
// api.Names.AnnotationPolicy), or the default (Server.policy) when it names none.
func (s *Server) policyFor(req api.PodRequest) (podPolicy, error) {
	if req.Policy == "" {
		return podPolicy{policy: s.policy}, nil
	}
	ps := &s.allowed
	if p, ok := ps.byName[req.Policy]; ok {
		return p, nil
	}
	if _, err := registry.Lookup(req.Policy); err != nil {
		return podPolicy{}, fmt.Errorf("%w: the pod's annotation %s names %q, which is no policy: allowed here are %s (known policies: %s); name one of those allowed or remove the annotation",
			ErrPolicyNotAllowed, s.names.AnnotationPolicy(), req.Policy, ps.names, strings.Join(registry.Names(), ", "))
	}
	return podPolicy{}, fmt.Errorf("%w: the pod's annotation %s names %q, which this cluster's operator does not allow (the extender's --allowed-policies): allowed here are %s; name one of those or remove the annotation",
		ErrPolicyNotAllowed, s.names.AnnotationPolicy(), req.Policy, ps.names)
}

// decisionInput is what the policy needs beyond the nodes: the policy the
// pod runs under and the allocator's request, card choice included.
type decisionInput struct {
	policy podPolicy
	req    allocator.Request
}

// podInput reads the pod's choice (policy and cards) from its request; a
// malformed annotation (api.PodRequest.ChoiceErr) or a policy that is not
// allowed is the pod's error. A card choice is given the verdicts for the
// models of w (the cluster's), so that the decision looks a card's model
// up instead of matching it word by word.
func (s *Server) podInput(preq api.PodRequest, w *allocator.Workload) (decisionInput, error) {
	if preq.ChoiceErr != nil {
		return decisionInput{}, fmt.Errorf("%w; the pod cannot be placed until it is fixed", preq.ChoiceErr)
	}
	p, err := s.policyFor(preq)
	if err != nil {
		return decisionInput{}, err
	}
	req := allocator.NewRequest(preq)
	if !preq.Cards.Empty() {
		var known []string
		if w != nil {
			known = slices.Collect(maps.Keys(w.ModelCapacity))
		}
		req.Cards = allocator.NewCardFilter(preq.Cards, known)
	}
	return decisionInput{policy: p, req: req}, nil
}
