package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// Bind outcomes, the label of the bind counter.
const (
	outcomeBound       = "bound"
	outcomeNoFit       = "no_fit"
	outcomeInvalid     = "invalid"
	outcomeAPIError    = "api_error"
	outcomeAssumeError = "assume_error"
	// outcomeThrottled: the API write budget could not start the Binding
	// before the bind's deadline; nothing was written.
	outcomeThrottled = "throttled"
	// outcomeCancelled: the caller went away before the Binding was sent.
	outcomeCancelled = "cancelled"
	// outcomeUnknown: the Binding was sent but no answer came (timeout,
	// broken connection); the units stay assumed (cache.FinishBinding).
	outcomeUnknown = "unknown"
)

// maxAssumeAttempts bounds the decide/assume loop. An attempt fails only
// when the node changed since its snapshot, i.e. when another bind (or an
// informer event) made progress there, so the loop cannot livelock; the
// bound only guards against a node that changes without pause.
const maxAssumeAttempts = 100

// Bind implements the bind verb with one API write: decide the cards on the
// node's current snapshot and assume them, then POST the pod's Binding with
// the assignment in its metadata.annotations. The API server copies those
// annotations onto the pod in the same update that sets spec.nodeName, so the
// record and the binding land together or not at all: there is nothing to
// clean up when the write fails, and the assumption is simply forgotten.
//
// The whole bind stays within the bind timeout (below kube-scheduler's
// extender httpTimeout): when the API write budget cannot start the write
// before the timeout less bindWriteAllowance, the bind fails at once instead
// of queueing past the moment kube-scheduler gives up on it.
func (s *Server) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*extenderv1.ExtenderBindingResult, error) {
	start := s.clock.Now()
	defer s.metrics.observe("bind", s.clock, start)
	if args == nil {
		return nil, fmt.Errorf("%w: empty body", ErrBadRequest)
	}
	switch {
	case args.PodName == "":
		return nil, fmt.Errorf("%w: PodName is missing", ErrBadRequest)
	case args.PodNamespace == "":
		return nil, fmt.Errorf("%w: PodNamespace is missing", ErrBadRequest)
	case args.PodUID == "":
		return nil, fmt.Errorf("%w: PodUID is missing", ErrBadRequest)
	case args.Node == "":
		return nil, fmt.Errorf("%w: Node is missing", ErrBadRequest)
	}
	if !s.cache.Synced() {
		return nil, ErrNotReady
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node)
	outcome, err := s.bind(ctx, args, start.Add(s.bindTimeout))
	s.metrics.binds.WithLabelValues(outcome).Inc()
	if err != nil {
		logger.Info("Bind failed", "outcome", outcome, "err", err)
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}, nil
	}
	logger.V(2).Info("Bound", "outcome", outcome, "duration", s.clock.Since(start))
	return &extenderv1.ExtenderBindingResult{}, nil
}

// bindWriteAllowance is the part of the bind timeout kept for the Binding
// write itself: a write starts only while at least this much of the bind's
// time remains. One Binding takes milliseconds on a healthy API server; the
// upstream SLO for a single-object mutating call is p99 ≤ 1 s.
const bindWriteAllowance = time.Second

func (s *Server) bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs, deadline time.Time) (string, error) {
	pod, err := s.getPod(ctx, args.PodNamespace, args.PodName, deadline)
	if err != nil {
		return outcomeAPIError, fmt.Errorf("bind %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if pod.UID != args.PodUID {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: pod UID is %s, the request names %s (was the pod recreated?)", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	if pod.Spec.NodeName != "" {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: pod is already bound to %s", args.PodNamespace, args.PodName, pod.Spec.NodeName)
	}
	preq, err := s.names.RequestFromPod(pod)
	if err == nil {
		err = errTooManyContainers(s.names, preq)
	}
	if err != nil {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if preq.Empty() {
		// kube-scheduler delegates a bind only for pods asking for a resource
		// the extender manages, so this caller is not kube-scheduler: refuse
		// rather than bind any pod to any node on its say-so.
		return outcomeInvalid, fmt.Errorf("bind %s/%s: the pod asks for no %s; the gpushare extender binds only pods that do, or that ask for %s (kube-scheduler binds the others itself)", args.PodNamespace, args.PodName, s.names.ResourceName(), s.names.WholeResourceName())
	}

	a, claimed := s.cache.Claim(pod.UID, args.Node) // the filter's reservation (reserve)
	if outcome := ""; !claimed {
		if a, outcome, err = s.assume(pod, preq, args.Node); err != nil {
			return outcome, err
		}
	}
	// From here on the assumption is in the cache; no lock is held.
	signed, err := api.KeysOf(s.recordKeys).Sign(a)
	if err != nil {
		s.cache.Forget(pod.UID)
		return outcomeInvalid, fmt.Errorf("bind %s/%s: signing the record: %w", pod.Namespace, pod.Name, err)
	}
	value, err := api.EncodeAssignment(signed)
	if err != nil {
		s.cache.Forget(pod.UID)
		return outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if outcome, err := s.admitWrite(ctx, pod, deadline); err != nil {
		s.cache.Forget(pod.UID)
		return outcome, err
	}
	err = s.postBinding(ctx, pod, args.Node, map[string]string{s.names.AnnotationAssignment(): value})
	switch {
	case err == nil:
		s.cache.FinishBinding(pod.UID)
		return outcomeBound, nil
	case writeOutcomeUnknown(err):
		s.cache.FinishBinding(pod.UID)
		return outcomeUnknown, fmt.Errorf("%w (the pod may or may not be bound; its cards stay reserved until the extender sees which)", err)
	default:
		// The API server refused the Binding: nothing was written.
		s.cache.Forget(pod.UID)
		return outcomeAPIError, err
	}
}

// admitWrite takes a token from the API write budget for the pod's Binding.
// It fails at once, writing nothing, when the token would come too late for
// the write to finish before deadline, and when the caller goes away while
// it waits.
func (s *Server) admitWrite(ctx context.Context, pod *corev1.Pod, deadline time.Time) (string, error) {
	if s.writes == nil {
		return "", nil
	}
	now := s.clock.Now()
	startBy := deadline.Add(-bindWriteAllowance)
	r := s.writes.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if !r.OK() || now.Add(delay).After(startBy) {
		r.CancelAt(now)
		return outcomeThrottled, fmt.Errorf("bind %s/%s: not bound: the extender's API write budget (%v writes/s, burst %d) could start this Binding only in %v, too late to finish within the bind timeout (%v); kube-scheduler retries the pod. If this repeats, raise the extender's --kube-api-qps/--kube-api-burst",
			pod.Namespace, pod.Name, float64(s.writes.Limit()), s.writes.Burst(), delay.Round(time.Millisecond), s.bindTimeout)
	}
	if delay == 0 {
		return "", nil
	}
	t := s.clock.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C():
		return "", nil
	case <-ctx.Done():
		r.CancelAt(s.clock.Now())
		return outcomeCancelled, fmt.Errorf("bind %s/%s: not bound: the caller gave up while the Binding waited %v for the API write budget: %w", pod.Namespace, pod.Name, delay.Round(time.Millisecond), ctx.Err())
	}
}

// writeOutcomeUnknown reports whether a failed write may still have been
// applied: no answer came (timeout, broken connection, cancelled request), or
// the API server said it may still be processing it.
func writeOutcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// assume decides the cards on the node's current snapshot and records them
// in the cache, deciding again when another bind changed the node between
// the snapshot and the assumption.
func (s *Server) assume(pod *corev1.Pod, preq api.PodRequest, node string) (api.Assignment, string, error) {
	in, err := s.podInput(preq, nil)
	if err != nil {
		return api.Assignment{}, outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for attempt := 0; attempt < maxAssumeAttempts; attempt++ {
		snap, err := s.cache.NodeSnapshot(node)
		if err != nil {
			return api.Assignment{}, outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		// Promises only add use (promise.go); Assume checks the real snapshot.
		view := s.promised(pod, []string{node}, []*allocator.Node{snap})[0]
		d := in.policy.policy.Decide(view, in.req, s.cache.Workload())
		if !d.Fits {
			return api.Assignment{}, outcomeNoFit, fmt.Errorf("bind %s/%s: pod no longer fits on node %s: %s", pod.Namespace, pod.Name, node, d.Message())
		}
		a, err := assignmentFrom(pod, snap, d)
		if err != nil {
			return api.Assignment{}, outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		err = s.cache.Assume(pod, preq, a, snap)
		switch {
		case err == nil:
			return a, "", nil
		case errors.Is(err, cache.ErrStale):
			continue
		default:
			return api.Assignment{}, outcomeAssumeError, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return api.Assignment{}, outcomeAssumeError, fmt.Errorf("bind %s/%s: node %s kept changing during %d attempts", pod.Namespace, pod.Name, node, maxAssumeAttempts)
}

// assignmentFrom turns a fitting decision into the record bind writes.
func assignmentFrom(pod *corev1.Pod, node *allocator.Node, d allocator.Decision) (api.Assignment, error) {
	a := api.Assignment{
		Version: api.AssignmentVersion,
		PodUID:  pod.UID,
		Node:    node.Name,
		Unit:    node.Unit,
		Phase:   api.PhaseAssigned,
	}
	uuidOf := func(index int) string {
		for _, c := range node.Cards {
			if c.Index == index {
				return c.UUID
			}
		}
		return ""
	}
	for _, p := range d.Placements {
		if len(p.Grants) > 0 && p.Grants[0].Whole {
			w := api.WholeCardAssignment{Name: p.Container}
			for _, g := range p.Grants {
				if !g.Whole {
					return api.Assignment{}, fmt.Errorf("container %q: the policy mixed whole cards and a share in one container", p.Container)
				}
				w.CardUUIDs = append(w.CardUUIDs, uuidOf(g.Card))
				w.CardIndexes = append(w.CardIndexes, g.Card)
			}
			a.WholeCards = append(a.WholeCards, w)
			continue
		}
		if len(p.Grants) != 1 {
			return api.Assignment{}, fmt.Errorf("container %q: the extender writes exactly one card per container, the policy gave %d", p.Container, len(p.Grants))
		}
		g := p.Grants[0]
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: p.Container, CardUUID: uuidOf(g.Card), CardIndex: g.Card, Units: g.Units})
	}
	if err := a.Validate(); err != nil {
		return api.Assignment{}, err
	}
	return a, nil
}

// getPod reads the pod from the informer's lister, or, when the lister does
// not have it yet, from the API server's cache (resourceVersion 0: no etcd
// read; what bind reads of the pod does not change once it exists, and the
// Binding itself is refused for another UID or a bound pod), giving up at
// the bind's deadline (less the write's allowance): a read that waits for
// the request budget past it fails at once rather than queueing.
func (s *Server) getPod(ctx context.Context, ns, name string, deadline time.Time) (*corev1.Pod, error) {
	if s.pods != nil {
		if p, err := s.pods.Pods(ns).Get(name); err == nil {
			return p, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, deadline.Add(-bindWriteAllowance).Sub(s.clock.Now()))
	defer cancel()
	return s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
}

// postBinding binds the pod to the node in one API write; the API server
// copies annotations onto the pod with spec.nodeName, and refuses a pod
// recreated under the same name (the Binding's UID) or already bound. Once
// sent, the write is not cancelled with the caller: a write cut short leaves
// the caller unsure whether the pod is bound, so it runs to its answer, within
// the bind timeout.
func (s *Server) postBinding(ctx context.Context, pod *corev1.Pod, node string, annotations map[string]string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.bindTimeout)
	defer cancel()
	if err := s.bindClient.CoreV1().Pods(pod.Namespace).Bind(wctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

// reserveTTL bounds a reservation no bind claimed (docs/design.md, "Reservations"):
// kube-scheduler binds at once unless a Permit plugin makes it wait.
const reserveTTL = 30 * time.Second

// reserve assumes pod's cards on node, the one node its best-mode filter kept (so kube-scheduler's
// choice): the pods filtered while its bind is in flight see them taken, and its bind claims them.
func (s *Server) reserve(pod *corev1.Pod, node string) {
	preq, err := s.names.RequestFromPod(pod)
	if err != nil || preq.Empty() {
		return
	}
	if _, _, err := s.assume(pod, preq, node); err != nil {
		klog.V(4).InfoS("Not reserving the filter's node", "pod", klog.KObj(pod), "node", node, "err", err)
		return
	}
	s.cache.Reserve(pod.UID, reserveTTL)
}
