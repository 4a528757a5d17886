package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// Preempt implements the preempt verb (kube-scheduler's ProcessPreemption).
// kube-scheduler has chosen, per candidate node, victims that free enough
// on the node's totals; for a pod that asks for gpu-mem or whole cards this
// replaces the victims that hold GPU memory with the ones that free it on
// one card (allocator.Policy.Preempt), keeps kube-scheduler's other victims
// (they free its CPU, memory or ports), and drops the nodes where no
// eviction of lower-priority pods makes the pod fit on a card. What the
// freed cards would take is offered to the pod (cache.Cache.Offer): the node
// kube-scheduler nominates keeps them for it while the victims terminate.
//
// A pod that asks for no GPU gets kube-scheduler's victims back unchanged; a
// pod whose demand is invalid gets no node (no preemption helps it).
func (s *Server) Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	defer s.metrics.observe("preempt", s.clock, s.clock.Now())
	if args == nil || args.Pod == nil {
		return nil, fmt.Errorf("%w: Pod is missing", ErrBadRequest)
	}
	if !s.cache.Synced() {
		return nil, ErrNotReady
	}
	given := kubeVictims(args)
	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	preq, err := s.names.RequestFromPod(args.Pod)
	if err == nil {
		err = errTooManyContainers(s.names, preq)
	}
	if err != nil {
		return res, nil
	}
	if preq.Empty() {
		for node, uids := range given {
			res.NodeNameToMetaVictims[node] = metaVictims(uids, args, node)
		}
		return res, nil
	}
	w := s.cache.Workload()
	in, err := s.podInput(preq, w)
	if err != nil {
		return res, nil
	}
	pdbs, err := s.pdbsOf()
	if err != nil {
		return nil, err
	}
	prio := podPriority(args.Pod)
	offers := map[string]api.Assignment{}
	for node, kube := range given {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("preempt: stopped, the request ended: %w", context.Cause(ctx))
		}
		snap, holders, err := s.cache.Holders(node)
		if err != nil {
			continue
		}
		// kube-scheduler's victims that hold no GPU memory stay victims.
		holds := map[types.UID]bool{}
		for _, h := range holders {
			holds[h.UID] = true
		}
		var keep []types.UID
		for _, uid := range kube {
			if !holds[uid] {
				keep = append(keep, uid)
			}
		}
		cands := s.potentialVictims(ctx, holders, prio)
		flags := pdbViolations(cands, pdbs)
		hs := make([]allocator.Holder, len(cands))
		for i, c := range cands {
			hs[i] = allocator.Holder{ID: string(c.pod.UID), Priority: podPriority(c.pod), ViolatesPDB: flags[i], Grants: c.grants}
		}
		v, ok := in.policy.policy.Preempt(snap, in.req, w, hs)
		if !ok || len(v.Holders)+len(keep) == 0 {
			continue
		}
		mv := &extenderv1.MetaVictims{NumPDBViolations: int64(v.Violations)}
		for _, uid := range keep {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(uid)})
		}
		for _, h := range v.Holders {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: hs[h].ID})
		}
		res.NodeNameToMetaVictims[node] = mv
		if a, err := assignmentFrom(args.Pod, snap, allocator.Decision{Fits: true, Placements: v.Placements}); err == nil {
			offers[node] = a
		}
	}
	s.cache.Offer(args.Pod, offers)
	return res, nil
}

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

// kubeVictims returns kube-scheduler's victims per node, as UIDs, from
// whichever form the call carries (NodeNameToMetaVictims when the extender
// is nodeCacheCapable, NodeNameToVictims otherwise).
func kubeVictims(args *extenderv1.ExtenderPreemptionArgs) map[string][]types.UID {
	out := map[string][]types.UID{}
	for node, v := range args.NodeNameToMetaVictims {
		out[node] = nil
		if v == nil {
			continue
		}
		for _, p := range v.Pods {
			if p != nil {
				out[node] = append(out[node], types.UID(p.UID))
			}
		}
	}
	for node, v := range args.NodeNameToVictims {
		out[node] = nil
		if v == nil {
			continue
		}
		for _, p := range v.Pods {
			if p != nil {
				out[node] = append(out[node], p.UID)
			}
		}
	}
	return out
}

// metaVictims is kube-scheduler's own answer for node, unchanged.
func metaVictims(uids []types.UID, args *extenderv1.ExtenderPreemptionArgs, node string) *extenderv1.MetaVictims {
	mv := &extenderv1.MetaVictims{}
	if v := args.NodeNameToMetaVictims[node]; v != nil {
		mv.NumPDBViolations = v.NumPDBViolations
	} else if v := args.NodeNameToVictims[node]; v != nil {
		mv.NumPDBViolations = v.NumPDBViolations
	}
	for _, uid := range uids {
		mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(uid)})
	}
	return mv
}

// candidate is a pod preemption may evict, with its units per card.
type candidate struct {
	pod    *corev1.Pod
	grants []allocator.Grant
}

// potentialVictims returns the holders whose priority is below prio, most
// important first (higher priority, then earlier start), as kube-scheduler
// orders them (then by name, so that equal choices are always the same). A
// holder whose pod cannot be read, or that is being deleted already, is
// not a candidate.
func (s *Server) potentialVictims(ctx context.Context, holders []cache.Holder, prio int32) []candidate {
	var out []candidate
	for _, h := range holders {
		pod, err := s.lookupPod(ctx, h.Namespace, h.Name)
		if err != nil || pod.UID != h.UID || podPriority(pod) >= prio || pod.DeletionTimestamp != nil {
			continue
		}
		out = append(out, candidate{pod: pod, grants: h.Grants})
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		if pa, pb := podPriority(a.pod), podPriority(b.pod); pa != pb {
			return cmp.Compare(pb, pa)
		}
		if c := startTime(a.pod).Compare(startTime(b.pod)); c != 0 {
			return c
		}
		if c := strings.Compare(a.pod.Namespace, b.pod.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.pod.Name, b.pod.Name)
	})
	return out
}

// startTime is when the pod started; one not started sorts last.
func startTime(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.AddDate(100, 0, 0)
}

func (s *Server) lookupPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	if s.pods != nil {
		return s.pods.Pods(ns).Get(name)
	}
	return s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// podPriority is the pod's priority, 0 when unset (kube's PodPriority).
func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// pdbsOf returns every PodDisruptionBudget (none without a lister).
func (s *Server) pdbsOf() ([]*policyv1.PodDisruptionBudget, error) {
	if s.pdbs == nil {
		return nil, nil
	}
	pdbs, err := s.pdbs.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	return pdbs, nil
}

// pdbViolations reports, for each candidate in order, whether evicting it
// would violate a PodDisruptionBudget, as kube-scheduler decides it
// (filterPodsWithPDBViolation): each matching budget's DisruptionsAllowed is
// used up by the candidates before it, a pod already in a budget's
// DisruptedPods does not use it, and a budget with an empty selector
// matches nothing.
func pdbViolations(cands []candidate, pdbs []*policyv1.PodDisruptionBudget) []bool {
	allowed := make([]int32, len(pdbs))
	for i, pdb := range pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
	}
	out := make([]bool, len(cands))
	for k, c := range cands {
		pod := c.pod
		if len(pod.Labels) == 0 {
			continue
		}
		for i, pdb := range pdbs {
			if pdb.Namespace != pod.Namespace {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			if _, done := pdb.Status.DisruptedPods[pod.Name]; done {
				continue
			}
			allowed[i]--
			if allowed[i] < 0 {
				out[k] = true
			}
		}
	}
	return out
}

// ownView returns snaps with the pod's nominated node replaced by the
// pod's own view of it, without the units promised to it (cache.Cache's
// NominatedView); snaps itself when the pod has no promise. The caller's
// snaps may be pooled or the decoder's: a changed one is a copy.
func (s *Server) ownView(pod *corev1.Pod, names []string, snaps []*allocator.Node) []*allocator.Node {
	node, view, _, ok := s.nominatedView(pod)
	if !ok {
		return snaps
	}
	i := slices.Index(names, node)
	if i < 0 {
		return snaps
	}
	out := slices.Clone(snaps)
	out[i] = view
	return out
}

// promiseFits reports whether the promised cards still take a on node:
// every share's card schedulable, not held whole and with the units free,
// every whole card schedulable and unused.
func promiseFits(node *allocator.Node, a api.Assignment) bool {
	card := func(uuid string) *allocator.Card {
		for i := range node.Cards {
			if node.Cards[i].UUID == uuid {
				return &node.Cards[i]
			}
		}
		return nil
	}
	need := map[string]int64{}
	for _, c := range a.Containers {
		need[c.CardUUID] += c.Units
	}
	for uuid, units := range need {
		if c := card(uuid); c == nil || !c.Schedulable() || c.Free() < units {
			return false
		}
	}
	for _, uuid := range a.WholeCardUUIDs() {
		if c := card(uuid); c == nil || !c.Schedulable() || c.Used > 0 || c.Whole || need[uuid] > 0 {
			return false
		}
	}
	return true
}

// nominatedView is the cache's NominatedView for a pod kube-scheduler has
// nominated a node for; other pods (nearly all) have no promise and skip
// the cache's lock.
func (s *Server) nominatedView(pod *corev1.Pod) (node string, view *allocator.Node, a api.Assignment, ok bool) {
	if pod.Status.NominatedNodeName == "" {
		return "", nil, api.Assignment{}, false
	}
	return s.cache.NominatedView(pod.UID)
}
