package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// Bind outcomes, the label of the bind counter.
const (
	outcomeBound       = "bound"
	outcomeBoundNoGPU  = "bound_without_gpu"
	outcomeNoFit       = "no_fit"
	outcomeInvalid     = "invalid"
	outcomeAPIError    = "api_error"
	outcomeAssumeError = "assume_error"
)

// maxAssumeAttempts bounds the decide/assume loop. An attempt fails only
// when the node changed since its snapshot, i.e. when another bind (or an
// informer event) made progress there, so the loop cannot livelock; the
// bound only guards against a node that changes without pause.
const maxAssumeAttempts = 100

// Bind implements the bind verb: decide the cards on the node's current
// snapshot and assume them, write the assignment annotation (merge patch,
// retried on conflict), then POST the Binding. If the pod no longer fits,
// nothing is written. If a write fails, the assumption is forgotten and the
// annotation, if written, is removed (best effort).
func (s *Server) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*extenderv1.ExtenderBindingResult, error) {
	start := time.Now()
	defer s.metrics.observe("bind", start)
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
	outcome, err := s.bind(ctx, args)
	s.metrics.binds.WithLabelValues(outcome).Inc()
	if err != nil {
		logger.Info("Bind failed", "outcome", outcome, "err", err)
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}, nil
	}
	logger.V(2).Info("Bound", "outcome", outcome, "duration", time.Since(start))
	return &extenderv1.ExtenderBindingResult{}, nil
}

func (s *Server) bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (string, error) {
	pod, err := s.getPod(ctx, args.PodNamespace, args.PodName)
	if err != nil {
		return outcomeAPIError, fmt.Errorf("bind %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if pod.UID != args.PodUID {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: pod UID is %s, the request names %s (was the pod recreated?)", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	if pod.Spec.NodeName != "" {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: pod is already bound to %s", args.PodNamespace, args.PodName, pod.Spec.NodeName)
	}
	preq, err := api.RequestFromPod(pod)
	if err != nil {
		return outcomeInvalid, fmt.Errorf("bind %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if preq.Empty() {
		if err := s.postBinding(ctx, pod, args.Node); err != nil {
			return outcomeAPIError, err
		}
		return outcomeBoundNoGPU, nil
	}

	a, outcome, err := s.assume(pod, preq, args.Node)
	if err != nil {
		return outcome, err
	}
	// From here on the assumption is in the cache; no lock is held.
	written, err := s.writeAssignment(ctx, pod, a)
	if err != nil {
		// Nothing was written (a merge patch applies whole or not at all).
		s.cache.Forget(pod.UID)
		return outcomeAPIError, err
	}
	if err := s.postBinding(ctx, pod, args.Node); err != nil {
		s.cache.Forget(pod.UID)
		s.removeAssignment(ctx, written)
		return outcomeAPIError, err
	}
	s.cache.FinishBinding(pod.UID)
	return outcomeBound, nil
}

// assume decides the cards on the node's current snapshot and records them
// in the cache, deciding again when another bind changed the node between
// the snapshot and the assumption.
func (s *Server) assume(pod *corev1.Pod, preq api.PodRequest, node string) (api.Assignment, string, error) {
	req := allocator.RequestFromPod(preq)
	req.Host = cache.HostRequest(pod)
	for attempt := 0; attempt < maxAssumeAttempts; attempt++ {
		snap, err := s.cache.NodeSnapshot(node)
		if err != nil {
			return api.Assignment{}, outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		d := s.policy.Decide(snap, req, s.cache.Workload())
		if !d.Fits {
			return api.Assignment{}, outcomeNoFit, fmt.Errorf("bind %s/%s: pod no longer fits on node %s: %s", pod.Namespace, pod.Name, node, d.Message())
		}
		a, err := assignmentFrom(pod, snap, d)
		if err != nil {
			return api.Assignment{}, outcomeInvalid, fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		err = s.cache.Assume(pod, a, snap)
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
	for _, p := range d.Placements {
		if len(p.Grants) != 1 {
			return api.Assignment{}, fmt.Errorf("container %q: the extender writes exactly one card per container, the policy gave %d", p.Container, len(p.Grants))
		}
		g := p.Grants[0]
		uuid := ""
		for _, c := range node.Cards {
			if c.Index == g.Card {
				uuid = c.UUID
			}
		}
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: p.Container, CardUUID: uuid, CardIndex: g.Card, Units: g.Units})
	}
	if err := a.Validate(); err != nil {
		return api.Assignment{}, err
	}
	return a, nil
}

// getPod reads the pod from the informer's lister, or from the API when the
// lister does not have it yet.
func (s *Server) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	if s.pods != nil {
		if p, err := s.pods.Pods(ns).Get(name); err == nil {
			return p, nil
		}
	}
	return s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// annotationPatch is a JSON merge patch of the assignment annotation with
// preconditions: the pod's UID (a recreated pod is never patched) and, when
// known, its resourceVersion (a concurrent change makes the patch conflict and
// retry on the fresh pod). A nil value removes the annotation.
func annotationPatch(uid types.UID, resourceVersion string, value *string) ([]byte, error) {
	meta := map[string]any{
		"uid":         uid,
		"annotations": map[string]*string{api.AnnotationAssignment: value},
	}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// writeAssignment writes the assignment annotation, overwriting whatever the
// pod carried, retrying on conflict with a freshly read pod. It returns the
// pod as patched.
func (s *Server) writeAssignment(ctx context.Context, pod *corev1.Pod, a api.Assignment) (*corev1.Pod, error) {
	value, err := api.EncodeAssignment(a)
	if err != nil {
		return nil, err
	}
	var written *corev1.Pod
	pods := s.client.CoreV1().Pods(pod.Namespace)
	rv := pod.ResourceVersion
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		patch, err := annotationPatch(pod.UID, rv, &value)
		if err != nil {
			return err
		}
		written, err = pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		cur, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case gerr != nil:
			return gerr
		case cur.UID != pod.UID:
			return fmt.Errorf("pod %s/%s was recreated during bind", pod.Namespace, pod.Name)
		case cur.Spec.NodeName != "":
			return fmt.Errorf("pod %s/%s was bound to %s during bind", pod.Namespace, pod.Name, cur.Spec.NodeName)
		}
		rv = cur.ResourceVersion
		return err // the conflict: retry with the fresh resourceVersion
	})
	if err != nil {
		return nil, fmt.Errorf("write %s on pod %s/%s: %w", api.AnnotationAssignment, pod.Namespace, pod.Name, err)
	}
	return written, nil
}

// removeAssignment removes the annotation after a failed Binding, best
// effort. pod is the pod as our write left it: if anything changed it since,
// the resourceVersion precondition makes the removal conflict and the
// annotation stays (a record for another node is never believed anyway).
func (s *Server) removeAssignment(ctx context.Context, pod *corev1.Pod) {
	patch, err := annotationPatch(pod.UID, pod.ResourceVersion, nil)
	if err == nil {
		_, err = s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Info("Could not remove the assignment after a failed bind", "pod", klog.KObj(pod), "err", err)
	}
}

// postBinding binds the pod to the node.
func (s *Server) postBinding(ctx context.Context, pod *corev1.Pod, node string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}
