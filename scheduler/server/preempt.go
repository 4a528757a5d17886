package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// ReasonPreemptionNotHelpful is the reason of the Warning event the preempt
// verb writes on a pod when no candidate node has cards that evictions
// free for it.
const ReasonPreemptionNotHelpful = "PreemptionNotHelpful"

// Preempt implements the preempt verb (kube-scheduler's ProcessPreemption):
// for each candidate node kube-scheduler found by its own dry run, the
// victims that free the preemptor's memory on its cards
// (allocator.Policy.SelectVictims), replacing the ones kube-scheduler chose
// on node totals; a node where no eviction frees a card is dropped. The
// answer names nodes of the request only, and pods the cache shows bound
// there.
//
// The answer is also recorded as an offer (promise.go): once
// kube-scheduler nominates the pod to one of these nodes and that node's
// victims terminate, the freed cards are kept for the preemptor.
func (s *Server) Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	defer s.metrics.observe("preempt", s.clock, s.clock.Now())
	if args == nil {
		return nil, fmt.Errorf("%w: empty body", ErrBadRequest)
	}
	if args.Pod == nil {
		return nil, fmt.Errorf("%w: Pod is missing", ErrBadRequest)
	}
	var names []string
	switch {
	case args.NodeNameToMetaVictims != nil:
		names = slices.Sorted(mapKeys(args.NodeNameToMetaVictims))
	case args.NodeNameToVictims != nil:
		names = slices.Sorted(mapKeys(args.NodeNameToVictims))
	default:
		return nil, fmt.Errorf("%w: neither NodeNameToMetaVictims nor NodeNameToVictims is set", ErrBadRequest)
	}
	if !s.cache.Synced() {
		return nil, ErrNotReady
	}
	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	preq, err := s.names.RequestFromPod(args.Pod)
	if err == nil {
		err = errTooManyContainers(s.names, preq)
	}
	if err == nil && preq.Empty() {
		// Not a gpushare pod: kube-scheduler's victims stand.
		return passThrough(args), nil
	}
	var in decisionInput
	if err == nil {
		in, err = s.podInput(preq, s.cache.Workload())
	}
	if err != nil {
		s.notHelpful(ctx, args.Pod, []string{err.Error()})
		return res, nil
	}
	prio := podPriority(args.Pod)
	budgets := s.budgets()
	w := s.cache.Workload()
	answers := make([]nodeAnswer, len(names))
	parallel(len(names), s.workers, func(i int) {
		answers[i] = s.preemptOn(names[i], in, prio, budgets, w)
	})
	offers := map[string]offer{}
	var whys []string
	for i, a := range answers {
		if a.victims == nil {
			whys = append(whys, a.why)
			continue
		}
		res.NodeNameToMetaVictims[names[i]] = a.victims
		offers[names[i]] = a.offer
	}
	s.promises.offer(args.Pod, prio, offers, s.clock.Now())
	if len(res.NodeNameToMetaVictims) == 0 && len(names) > 0 {
		s.notHelpful(ctx, args.Pod, whys)
	}
	return res, nil
}

// nodeAnswer is the preempt verb's answer for one node: victims (nil when
// none help, with why) and the offer they make.
type nodeAnswer struct {
	victims *extenderv1.MetaVictims
	offer   offer
	why     string
}

// preemptOn weighs one candidate node.
func (s *Server) preemptOn(name string, in decisionInput, prio int32, budgets budgetSet, w *allocator.Workload) nodeAnswer {
	held, snap := s.cache.Residents(name)
	if snap == nil {
		return nodeAnswer{why: fmt.Sprintf("node %s: %v", name, cache.ErrUnknownNode)}
	}
	rs, refs := s.residents(held, budgets)
	v, ok, why := in.policy.policy.SelectVictims(allocator.Preemption{Node: snap, Residents: rs, Budgets: budgets.allowed,
		Request: in.req, Priority: prio, Workload: w})
	if !ok {
		return nodeAnswer{why: why}
	}
	a := nodeAnswer{victims: &extenderv1.MetaVictims{NumPDBViolations: int64(v.PDBViolations)}, offer: offer{cards: v.Cards()}}
	for _, id := range v.IDs {
		a.victims.Pods = append(a.victims.Pods, &extenderv1.MetaPod{UID: id})
		a.offer.victims = append(a.offer.victims, refs[id])
	}
	for _, p := range v.Placements {
		a.offer.held = append(a.offer.held, p.Grants...)
	}
	return a
}

// parallel calls f(i) for every i < n on up to workers goroutines.
func parallel(n, workers int, f func(i int)) {
	workers = min(max(workers, 1), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// passThrough answers with the victims kube-scheduler sent.
func passThrough(args *extenderv1.ExtenderPreemptionArgs) *extenderv1.ExtenderPreemptionResult {
	out := map[string]*extenderv1.MetaVictims{}
	for n, v := range args.NodeNameToMetaVictims {
		out[n] = v
	}
	for n, v := range args.NodeNameToVictims {
		mv := &extenderv1.MetaVictims{NumPDBViolations: v.NumPDBViolations}
		for _, p := range v.Pods {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
		out[n] = mv
	}
	return &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: out}
}

// podPriority is the pod's priority as kube-scheduler reads it (0 unset).
func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// budgetSet is the PodDisruptionBudgets of one call.
type budgetSet struct {
	pdbs      []*policyv1.PodDisruptionBudget
	selectors []labels.Selector
	allowed   []int32
}

// budgets lists the PodDisruptionBudgets (none without a lister). A budget
// whose selector is empty or invalid covers no pod, as in kube-scheduler.
func (s *Server) budgets() budgetSet {
	var b budgetSet
	if s.pdbs == nil {
		return b
	}
	list, err := s.pdbs.List(labels.Everything())
	if err != nil {
		return b
	}
	for _, pdb := range list {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		b.pdbs = append(b.pdbs, pdb)
		b.selectors = append(b.selectors, sel)
		b.allowed = append(b.allowed, pdb.Status.DisruptionsAllowed)
	}
	return b
}

// residents converts the cache's residents for SelectVictims, reading
// each pod's priority, start and labels from the pod informer. A pod the
// informer does not show as the cache does (not found, another UID), or
// one only assumed, is protected: kube-scheduler could not evict it.
func (s *Server) residents(held []cache.Resident, b budgetSet) ([]allocator.Resident, map[string]podRef) {
	out := make([]allocator.Resident, 0, len(held))
	refs := make(map[string]podRef, len(held))
	for _, h := range held {
		r := allocator.Resident{ID: string(h.UID), Grants: h.Grants, Protected: true}
		refs[r.ID] = podRef{namespace: h.Namespace, name: h.Name, uid: h.UID}
		var pod *corev1.Pod
		if s.pods != nil {
			pod, _ = s.pods.Pods(h.Namespace).Get(h.Name)
		}
		if pod != nil && pod.UID == h.UID && h.State == cache.Confirmed {
			r.Protected = false
			r.Priority = podPriority(pod)
			r.Started = pod.CreationTimestamp.UnixNano()
			if pod.Status.StartTime != nil {
				r.Started = pod.Status.StartTime.UnixNano()
			}
			for i, pdb := range b.pdbs {
				if pdb.Namespace != pod.Namespace || !b.selectors[i].Matches(labels.Set(pod.Labels)) {
					continue
				}
				if _, disrupted := pdb.Status.DisruptedPods[pod.Name]; disrupted {
					continue
				}
				r.Budgets = append(r.Budgets, i)
			}
		}
		out = append(out, r)
	}
	return out, refs
}

// notHelpful writes a Warning event on the pod saying why no candidate
// node's cards can be freed for it (kube-scheduler's own event only says
// that no candidate is left).
func (s *Server) notHelpful(ctx context.Context, pod *corev1.Pod, whys []string) {
	slices.Sort(whys)
	whys = slices.Compact(whys)
	msg := "preemption cannot free GPU memory on one card for this pod: " + strings.Join(whys, "; ")
	now := metav1.NewTime(s.clock.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         ReasonPreemptionNotHelpful, Message: clipReason(msg), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "gpushare-scheduler"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := s.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Info("Could not report why preemption does not help", "pod", klog.KObj(pod), "err", err)
	}
}
