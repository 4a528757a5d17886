package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
)

// Hooks are the restarts and tools the environment provides.
type Hooks struct {
	// KillExtender SIGKILLs the extender, starts it again and returns once
	// it is ready (its /readyz), so that the run's checks can read /inspect.
	KillExtender func(ctx context.Context) error
	// KillPlugin SIGKILLs a device plugin of the node (its agent restarts it) and says whether
	// another plugin of the node was registered with the kubelet then (a standby: the node's
	// devices stay healthy; NodeEvent.Covered).
	KillPlugin func(ctx context.Context, node string) (covered bool, err error)
	// KillAgent SIGKILLs the node's agent and starts another one.
	KillAgent func(ctx context.Context, node string) error
	// Inspector runs `kubectl inspect gpushare -o json`.
	Inspector func(ctx context.Context) ([]byte, error)
	// Ready reports whether every component runs and has recovered from the
	// run's restarts (each agent Ready with its plugin registered, the
	// extender ready); the final checks wait for it.
	Ready func(ctx context.Context) error
}

// Deployment is a Deployment the run scales: its name and its pod shape.
type Deployment struct {
	Name  string
	Units []int64
}

// Runner executes a plan and checks the invariants.
type Runner struct {
	Client        kubernetes.Interface
	Namespace     string
	SchedulerName string
	// NodeSelector keeps the run's pods on the run's nodes.
	NodeSelector map[string]string
	Topology     Topology
	Deployments  []Deployment
	Observer     *Observer
	Hooks        Hooks
	Seed         uint64
	// KeepGoing records violations and goes on instead of stopping at the
	// first one (to collect evidence of several kinds in one run).
	KeepGoing bool
	// InspectEvery runs the inspector every so many operations (0: only at
	// the end).
	InspectEvery int
	// Logf receives progress lines.
	Logf  func(format string, args ...any)
	start time.Time
	log   []string
	live  map[string]types.UID
	// rejected are the pods already counted in Report.Rejected.
	rejected map[types.UID]bool
	// events are the kills and isolations by node, for AdmissionCause.
	events map[string][]NodeEvent
	// deleted are the pods ("namespace/name") the run deleted.
	deleted map[string]bool
	mu      sync.Mutex
}

// Report is what a run did and found.
type Report struct {
	Seed     uint64
	Ops      int
	Planned  int
	Kinds    map[Kind]int
	Restarts map[Kind]int
	Created  int
	Refused  map[string]int // creations the API server refused, by message
	Rejected map[string]int // pods the kubelet rejected (Failed), by reason
	// AdmissionCauses are the pods the kubelet rejected for their devices
	// (UnexpectedAdmissionError), by cause (AdmissionCause).
	AdmissionCauses map[Cause]int
	Deleted         int
	Checks          int
	Violations      []Violation
	// FirstViolationOp is the operation after which the first violation was
	// seen (0: none, -1: at the end).
	FirstViolationOp int
	Duration         time.Duration
	// Log is the operation log; State the state at the first violation (or
	// at the end).
	Log   []string
	State string
	// States is the state at the first violation of each invariant.
	States map[string]string
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Summary is the figures in one paragraph.
func (r *Report) Summary() string {
	var restarts []string
	total := 0
	for _, k := range []Kind{KindKillExtender, KindKillPlugin, KindKillAgent} {
		restarts = append(restarts, fmt.Sprintf("%s %d", k, r.Restarts[k]))
		total += r.Restarts[k]
	}
	refused, rejected := 0, 0
	for _, n := range r.Refused {
		refused += n
	}
	for _, n := range r.Rejected {
		rejected += n
	}
	return fmt.Sprintf("seed %d: %d of %d operations, %d checks, %d restarts survived (%s), %d pods created, %d refused at creation, %d deleted by the run, %d rejected by the kubelet at admission (for their devices, by cause: %s); violations: %d; %v",
		r.Seed, r.Ops, r.Planned, r.Checks, total, strings.Join(restarts, ", "), r.Created, refused, r.Deleted, rejected, causesText(r.AdmissionCauses), len(r.Violations), r.Duration.Round(time.Second))
}

// Text is the whole report: summary, violations, replay, log and state.
func (r *Report) Text(replay string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos %s\n", r.Summary())
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "first violation after operation %d; replay: %s\n", r.FirstViolationOp, replay)
	}
	fmt.Fprintf(&b, "kinds: %v\nrefused at creation: %v\nrejected by the kubelet: %v\n", r.Kinds, r.Refused, r.Rejected)
	b.WriteString("operation log:\n")
	for _, l := range r.Log {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("state:\n" + r.State)
	if len(r.States) > 1 {
		for _, inv := range sortedKeys(r.States) {
			fmt.Fprintf(&b, "state at the first %q:\n%s", inv, r.States[inv])
		}
	}
	return b.String()
}

func (r *Runner) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.log = append(r.log, line)
	r.mu.Unlock()
}

// Run executes the plan, checking after every operation; then it waits for
// the environment to settle, checks again (Final), deletes everything and
// checks that every card is back to zero everywhere.
func (r *Runner) Run(ctx context.Context, plan []Op) (*Report, error) {
	r.start = time.Now()
	r.live = map[string]types.UID{}
	r.rejected = map[types.UID]bool{}
	r.events = map[string][]NodeEvent{}
	r.deleted = map[string]bool{}
	rep := &Report{Seed: r.Seed, Planned: len(plan), Kinds: map[Kind]int{}, Restarts: map[Kind]int{}, Refused: map[string]int{}, Rejected: map[string]int{}, AdmissionCauses: map[Cause]int{}, States: map[string]string{}}
	if r.Logf == nil {
		r.Logf = func(string, ...any) {}
	}
	defer func() {
		rep.Duration = time.Since(r.start)
		rep.Log = r.log
	}()
	if err := r.createDeployments(ctx); err != nil {
		return rep, err
	}
	exp := Expect{LargestCard: r.Topology.LargestCard()}
	var last *Observation
	// A violation that lasts is reported once (the first time), with how
	// many observations showed it again.
	seen := map[string]int{}
	record := func(after int, vs []Violation, obs *Observation) {
		if len(vs) == 0 {
			return
		}
		if rep.FirstViolationOp == 0 {
			rep.FirstViolationOp = after
			rep.State = r.describe(obs)
		}
		for _, v := range vs {
			key := v.Invariant + "\x00" + v.Object + "\x00" + v.Detail
			if i, ok := seen[key]; ok {
				rep.Violations[i].Repeats++
				continue
			}
			seen[key] = len(rep.Violations)
			v.AfterOp = after
			r.logf("VIOLATION %s", v)
			rep.Violations = append(rep.Violations, v)
			// With KeepGoing, the state at the first violation of each
			// invariant.
			if _, ok := rep.States[v.Invariant]; !ok {
				rep.States[v.Invariant] = r.describe(obs)
			}
		}
	}
	for _, op := range plan {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		rep.Kinds[op.Kind]++
		if err := r.do(ctx, op, rep); err != nil {
			r.logf("%s → error: %v", op, err)
			return rep, fmt.Errorf("operation %s: %w", op, err)
		}
		rep.Ops++
		obs, err := r.observe(ctx)
		if err != nil {
			return rep, fmt.Errorf("observe after %s: %w", op, err)
		}
		last = obs
		r.countRejected(obs, rep)
		exp.Live = r.liveCopy()
		vs := Check(obs, exp)
		if r.InspectEvery > 0 && op.Seq%r.InspectEvery == 0 {
			vs = append(vs, r.checkInspector(ctx, obs, false)...)
		}
		rep.Checks++
		record(op.Seq, vs, obs)
		if len(vs) > 0 && !r.KeepGoing {
			return rep, nil
		}
		if op.Seq%50 == 0 {
			r.Logf("chaos: %d/%d operations, %d pods, %d violations, %v", op.Seq, len(plan), len(obs.Pods), len(rep.Violations), time.Since(r.start).Round(time.Second))
		}
	}

	// The end: wait until the components are back and everything was tried.
	r.logf("settling")
	obs, err := r.settle(ctx)
	if err != nil {
		r.logf("did not settle: %v", err)
		record(-1, []Violation{violation(InvSettled, "run", err.Error())}, obs)
		if !r.KeepGoing {
			return rep, nil
		}
	}
	if obs != nil {
		last = obs
		exp.Live, exp.Final = r.liveCopy(), true
		vs := Check(obs, exp)
		vs = append(vs, r.checkDeployments(ctx, obs)...)
		vs = append(vs, r.checkInspector(ctx, obs, true)...)
		rep.Checks++
		r.countRejected(obs, rep)
		record(-1, vs, obs)
		if len(vs) > 0 && !r.KeepGoing {
			return rep, nil
		}
	}
	r.logf("deleting everything")
	if err := r.deleteAll(ctx); err != nil {
		return rep, err
	}
	var zero []Violation
	werr := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		obs, err := r.observe(ctx)
		if err != nil {
			return false, nil
		}
		last = obs
		zero = CheckZero(obs, r.inspectorUsage(ctx))
		return len(zero) == 0, nil
	})
	rep.Checks++
	if werr != nil {
		if len(zero) == 0 {
			zero = []Violation{violation(InvZero, "run", werr.Error())}
		}
		record(-1, zero, last)
	}
	if rep.State == "" {
		rep.State = r.describe(last)
	}
	rep.Duration = time.Since(r.start)
	r.logf("done: %s", rep.Summary())
	return rep, nil
}

func (r *Runner) liveCopy() map[string]types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]types.UID, len(r.live))
	for k, v := range r.live {
		out[k] = v
	}
	return out
}

// do executes one operation. Errors of the operations themselves (a create
// refused, a pod already gone) are outcomes, logged; only a failed restart
// or an unusable API server is an error of the run.
func (r *Runner) do(ctx context.Context, op Op, rep *Report) error {
	switch op.Kind {
	case KindCreate, KindBurst:
		r.createAll(ctx, op, rep)
	case KindDelete:
		for _, name := range op.Delete {
			r.deletePod(ctx, op, name, rep)
		}
	case KindScale:
		r.scale(ctx, op)
	case KindKillExtender:
		if err := r.Hooks.KillExtender(ctx); err != nil {
			return err
		}
		rep.Restarts[op.Kind]++
		r.logf("%s → restarted", op)
	case KindKillPlugin:
		at := time.Now()
		covered, err := r.Hooks.KillPlugin(ctx, op.Node)
		if err != nil {
			return err
		}
		r.nodeEvent(op.Node, NodeEvent{At: at, Kind: op.Kind, Covered: covered})
		rep.Restarts[op.Kind]++
		if covered {
			r.logf("%s → killed while another plugin of the node served (its agent restarts it)", op)
		} else {
			r.logf("%s → killed (its agent restarts it)", op)
		}
	case KindKillAgent:
		r.nodeEvent(op.Node, NodeEvent{Kind: op.Kind})
		if err := r.Hooks.KillAgent(ctx, op.Node); err != nil {
			return err
		}
		rep.Restarts[op.Kind]++
		r.logf("%s → restarted", op)
	case KindIsolate:
		r.isolate(ctx, op)
	case KindWriters:
		var wg sync.WaitGroup
		wg.Go(func() { r.createAll(ctx, op, rep) })
		if op.Deployment != "" {
			wg.Go(func() { r.scale(ctx, op) })
		}
		if op.SetIsolate {
			wg.Go(func() { r.isolate(ctx, op) })
		}
		for _, name := range op.Touch {
			wg.Go(func() { r.touchPod(ctx, op, name) })
		}
		for _, n := range r.Topology.Nodes {
			wg.Go(func() { r.touchNode(ctx, op, n.Name) })
		}
		wg.Wait()
	case KindPause:
		select {
		case <-ctx.Done():
		case <-time.After(op.Pause):
		}
		r.logf("%s", op)
	default:
		return fmt.Errorf("unknown operation kind %q", op.Kind)
	}
	return nil
}

// createAll creates the op's pods, all at once when there are several.
func (r *Runner) createAll(ctx context.Context, op Op, rep *Report) {
	var wg sync.WaitGroup
	for _, s := range op.Create {
		wg.Go(func() {
			p, err := r.Client.CoreV1().Pods(r.Namespace).Create(ctx, r.pod(s), metav1.CreateOptions{})
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				rep.Refused[firstLine(strings.ReplaceAll(err.Error(), s.Name, "<pod>"))]++
				r.log = append(r.log, fmt.Sprintf("%8.3fs #%d create %s → refused: %v", time.Since(r.start).Seconds(), op.Seq, s.Name, err))
				return
			}
			rep.Created++
			r.live[s.Name] = p.UID
			r.log = append(r.log, fmt.Sprintf("%8.3fs #%d create %s%v → uid %s", time.Since(r.start).Seconds(), op.Seq, s.Name, s.Units, p.UID))
		})
	}
	wg.Wait()
}

func (r *Runner) deletePod(ctx context.Context, op Op, name string, rep *Report) {
	r.mu.Lock()
	uid, ok := r.live[name]
	delete(r.live, name)
	r.mu.Unlock()
	if !ok {
		r.logf("#%d delete %s → was never created", op.Seq, name)
		return
	}
	err := r.Client.CoreV1().Pods(r.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err == nil || apierrors.IsNotFound(err) {
		r.mu.Lock()
		r.deleted[r.Namespace+"/"+name] = true
		r.mu.Unlock()
	}
	switch {
	case err == nil:
		rep.Deleted++
		r.logf("#%d delete %s → ok", op.Seq, name)
	case apierrors.IsNotFound(err):
		// Gone without the run deleting it: CheckLost already said so.
		r.logf("#%d delete %s → not found", op.Seq, name)
	default:
		r.logf("#%d delete %s → %v", op.Seq, name, err)
	}
}

func (r *Runner) scale(ctx context.Context, op Op) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, op.Replicas)
	_, err := r.Client.AppsV1().Deployments(r.Namespace).Patch(ctx, op.Deployment, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	r.logf("#%d scale %s=%d → %v", op.Seq, op.Deployment, op.Replicas, errText(err))
}

func (r *Runner) isolate(ctx context.Context, op Op) {
	r.nodeEvent(op.Node, NodeEvent{Kind: op.Kind, Isolated: len(op.Isolate) > 0})
	var value *string
	if len(op.Isolate) > 0 {
		parts := make([]string, len(op.Isolate))
		for i, idx := range op.Isolate {
			parts[i] = fmt.Sprint(idx)
		}
		value = ptr.To(strings.Join(parts, ","))
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{api.DefaultNames().AnnotationIsolation(): value}}})
	_, err := r.Client.CoreV1().Nodes().Patch(ctx, op.Node, types.MergePatchType, patch, metav1.PatchOptions{})
	r.logf("#%d isolate %s %v → %v", op.Seq, op.Node, op.Isolate, errText(err))
}

// touchAnnotation is a foreign writer's annotation, on pods and nodes.
const touchAnnotation = "chaos.gpushare.test/touched"

// touchPod is a third party's read-modify-write of a pod (like kubectl
// edit): it races the extender's bind, the plugin's record and the agent's
// status and records on the same object.
func (r *Runner) touchPod(ctx context.Context, op Op, name string) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := r.Client.CoreV1().Pods(r.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[touchAnnotation] = fmt.Sprint(op.Seq)
		_, err = r.Client.CoreV1().Pods(r.Namespace).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
	r.logf("#%d touch pod %s → %v", op.Seq, name, errText(err))
}

// touchNode is a third party's read-modify-write of a Node, racing the
// plugin's inventory and the agent's status.
func (r *Runner) touchNode(ctx context.Context, op Op, name string) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := r.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[touchAnnotation] = fmt.Sprint(op.Seq)
		_, err = r.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	r.logf("#%d touch node %s → %v", op.Seq, name, errText(err))
}

func (r *Runner) podSpec(units []int64) corev1.PodSpec {
	spec := corev1.PodSpec{
		SchedulerName:                 r.SchedulerName,
		NodeSelector:                  r.NodeSelector,
		TerminationGracePeriodSeconds: ptr.To[int64](1),
	}
	for i, u := range units {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "registry.k8s.io/pause:3.10"}
		if u > 0 {
			c.Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(u, resource.DecimalSI)}
		}
		spec.Containers = append(spec.Containers, c)
	}
	return spec
}

func (r *Runner) pod(s PodShape) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: r.Namespace, Labels: map[string]string{"chaos": "bare"}}, Spec: r.podSpec(s.Units)}
	if s.InitUnits > 0 || s.InitPlain {
		c := corev1.Container{Name: "init", Image: "registry.k8s.io/pause:3.10"}
		if s.InitUnits > 0 {
			c.Resources.Limits = corev1.ResourceList{api.DefaultNames().ResourceName(): *resource.NewQuantity(s.InitUnits, resource.DecimalSI)}
		}
		p.Spec.InitContainers = []corev1.Container{c}
	}
	return p
}

func (r *Runner) createDeployments(ctx context.Context) error {
	for _, d := range r.Deployments {
		labels := map[string]string{"chaos": "deployment", "deployment": d.Name}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: r.Namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: r.podSpec(d.Units)},
			},
		}
		if _, err := r.Client.AppsV1().Deployments(r.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create deployment %s: %w", d.Name, err)
		}
	}
	return nil
}

// settle waits (up to 3 minutes) until the components are ready, no pod is
// bound but not yet admitted, every unbound pod was judged, and every
// Deployment has as many pods as replicas; it returns the last observation.
func (r *Runner) settle(ctx context.Context) (*Observation, error) {
	var last *Observation
	var why string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := r.Hooks.Ready(ctx); err != nil {
			why = err.Error()
			return false, nil
		}
		obs, err := r.observe(ctx)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		last = obs
		why = unsettled(obs)
		if why == "" {
			why = r.deploymentsUnsettled(ctx, obs)
		}
		return why == "", nil
	})
	if err != nil {
		return last, fmt.Errorf("not settled after 3m: %s", why)
	}
	return last, nil
}

// unsettled says why the observation is not a resting state, or "".
func unsettled(obs *Observation) string {
	if obs.ExtenderErr != nil {
		return fmt.Sprintf("extender: %v", obs.ExtenderErr)
	}
	for _, n := range sortedKeys(obs.KubeletErr) {
		return fmt.Sprintf("node %s: %v", n, obs.KubeletErr[n])
	}
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.DeletionTimestamp != nil {
			return fmt.Sprintf("pod %s being deleted", p.Name)
		}
		if p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			continue
		}
		if p.Spec.NodeName != "" {
			return fmt.Sprintf("pod %s bound to %s, not admitted", p.Name, p.Spec.NodeName)
		}
		judged := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				judged = true
			}
		}
		if !judged {
			return fmt.Sprintf("pod %s not judged unschedulable yet", p.Name)
		}
		if why := staleInsufficient(obs, p); why != "" {
			return why
		}
	}
	return ""
}

// staleInsufficient says why an unbound pod's judgment is older than the
// room a node has now, or "": kube-scheduler judged it with its own
// Insufficient gpu-mem, yet a node has that much allocatable free now
// (pods deleted, an isolation lifted since). kube-scheduler tries it again
// on such events, after a backoff (up to 10 s); until then the state is
// not at rest. The final check (CheckPending with Final) reports a pod
// that is still so once the run gives up waiting.
func staleInsufficient(obs *Observation, p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || HasExtenderReason(c.Message) || !strings.Contains(c.Message, insufficientGPUMem) {
			continue
		}
		req, err := api.DefaultNames().RequestFromPod(p)
		if err != nil {
			return ""
		}
		if node, free := freeFor(obs, req.Total()); node != "" {
			return fmt.Sprintf("pod %s judged %q, but node %s has %d allocatable units free now: kube-scheduler has not tried it again yet", p.Name, insufficientGPUMem, node, free)
		}
	}
	return ""
}

func (r *Runner) deploymentsUnsettled(ctx context.Context, obs *Observation) string {
	for _, d := range r.Deployments {
		dep, err := r.Client.AppsV1().Deployments(r.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if n := activeOf(obs, d.Name); int32(n) != ptr.Deref(dep.Spec.Replicas, 0) {
			return fmt.Sprintf("deployment %s: %d pods, %d replicas", d.Name, n, ptr.Deref(dep.Spec.Replicas, 0))
		}
	}
	return ""
}

// checkDeployments: no Deployment lost a pod (as many active pods as
// replicas, once settled).
func (r *Runner) checkDeployments(ctx context.Context, obs *Observation) []Violation {
	var vs []Violation
	for _, d := range r.Deployments {
		dep, err := r.Client.AppsV1().Deployments(r.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			vs = append(vs, violation(InvLost, "deployment "+d.Name, err.Error()))
			continue
		}
		if n := activeOf(obs, d.Name); int32(n) != ptr.Deref(dep.Spec.Replicas, 0) {
			vs = append(vs, violation(InvLost, "deployment "+d.Name, fmt.Sprintf("%d active pods for %d replicas", n, ptr.Deref(dep.Spec.Replicas, 0))))
		}
	}
	return vs
}

func activeOf(obs *Observation, deployment string) int {
	n := 0
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Labels["deployment"] == deployment && p.DeletionTimestamp == nil && api.HoldsUnits(p) {
			n++
		}
	}
	return n
}

// countRejected counts the pods the kubelet rejected at admission, each
// once, by reason and message, as observations first show them Failed.
// Those rejected for their devices are also attributed to a cause.
func (r *Runner) countRejected(obs *Observation, rep *Report) {
	var held map[string]bool
	for i, p := range obs.Pods {
		if p.Status.Phase == corev1.PodFailed && !r.rejected[p.UID] {
			r.rejected[p.UID] = true
			rep.Rejected[p.Status.Reason+": "+shorten(p.Status.Message)]++
			if p.Status.Reason != admissionFailure {
				continue
			}
			if held == nil {
				held = WholeHeldNodes(obs.Pods, api.DefaultNames())
			}
			r.mu.Lock()
			events := r.events[p.Spec.NodeName]
			r.mu.Unlock()
			cause := AdmissionCause(&obs.Pods[i], obs.At, events, held[p.Spec.NodeName])
			rep.AdmissionCauses[cause]++
			r.logf("rejected at admission: %s on %s (%s): %s", p.Name, p.Spec.NodeName, cause, shorten(p.Status.Message))
		}
	}
}

// observe looks once (Observer.Observe) and notes the pods the run deleted
// before it (Observation.Deleted).
func (r *Runner) observe(ctx context.Context) (*Observation, error) {
	r.mu.Lock()
	deleted := make(map[string]bool, len(r.deleted))
	for k := range r.deleted {
		deleted[k] = true
	}
	r.mu.Unlock()
	obs, err := r.Observer.Observe(ctx)
	if obs != nil {
		obs.Deleted = deleted
	}
	return obs, err
}

// nodeEvent records a kill or an isolation of a node, now.
func (r *Runner) nodeEvent(node string, e NodeEvent) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	r.mu.Lock()
	r.events[node] = append(r.events[node], e)
	r.mu.Unlock()
}

// inspectorView is the part of `kubectl inspect gpushare -o json` the run
// reads.
type inspectorView struct {
	Nodes []struct {
		Name  string `json:"name"`
		Cards []struct {
			Index     int    `json:"index"`
			UUID      string `json:"uuid"`
			Allocated int64  `json:"allocated"`
			Total     int64  `json:"total"`
			Pods      []struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
				Units     int64  `json:"units"`
				Pending   bool   `json:"pending"`
			} `json:"pods"`
		} `json:"cards"`
	} `json:"nodes"`
}

func (r *Runner) inspector(ctx context.Context) (*inspectorView, error) {
	out, err := r.Hooks.Inspector(ctx)
	if err != nil {
		return nil, err
	}
	var v inspectorView
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("inspector JSON: %w", err)
	}
	return &v, nil
}

// checkInspector: the inspector shows no card of the run's nodes over its
// total: in the containers it shows allocated (not pending) while the run
// goes on, in everything it counts (pending plans too: see
// CheckRecordsCapacity) once the run has settled (final).
func (r *Runner) checkInspector(ctx context.Context, obs *Observation, final bool) []Violation {
	v, err := r.inspector(ctx)
	if err != nil {
		return []Violation{violation(InvInspectorCapacity, "inspector", err.Error())}
	}
	var vs []Violation
	// Pods released at the observation are released at the inspector's
	// later reading too (Observation.Released).
	released := obs.Released()
	for _, n := range v.Nodes {
		if _, ok := obs.Nodes[n.Name]; !ok {
			continue
		}
		for _, c := range n.Cards {
			var allocated, all int64
			for _, p := range c.Pods {
				if released[p.Namespace+"/"+p.Name] {
					continue
				}
				all += p.Units
				if !p.Pending {
					allocated += p.Units
				}
			}
			if allocated > c.Total {
				vs = append(vs, violation(InvInspectorCapacity, fmt.Sprintf("%s card %d (%s)", n.Name, c.Index, c.UUID), fmt.Sprintf("the inspector shows %d/%d, %d of them allocated", c.Allocated, c.Total, allocated)))
			} else if final && all > c.Total {
				vs = append(vs, violation(InvInspectorCapacity, fmt.Sprintf("%s card %d (%s)", n.Name, c.Index, c.UUID), fmt.Sprintf("the inspector shows %d/%d", c.Allocated, c.Total)))
			}
		}
	}
	return vs
}

// inspectorUsage is card UUID → allocated units for the run's nodes (empty
// if the inspector failed: CheckZero then reports the cards missing).
func (r *Runner) inspectorUsage(ctx context.Context) map[string]int64 {
	out := map[string]int64{}
	v, err := r.inspector(ctx)
	if err != nil {
		r.logf("inspector: %v", err)
		return out
	}
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			out[c.UUID] = c.Allocated
		}
	}
	return out
}

// deleteAll lifts every isolation, deletes the Deployments and every pod of
// the run, and waits until the pods are gone.
func (r *Runner) deleteAll(ctx context.Context) error {
	for _, n := range r.Topology.Nodes {
		r.isolate(ctx, Op{Seq: -1, Node: n.Name})
	}
	for _, d := range r.Deployments {
		err := r.Client.AppsV1().Deployments(r.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete deployment %s: %w", d.Name, err)
		}
	}
	if err := r.Client.CoreV1().Pods(r.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	r.mu.Lock()
	r.live = map[string]types.UID{}
	r.mu.Unlock()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := r.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		// The ReplicaSet controller may create a pod while the Deployment
		// is being deleted: delete again.
		if len(pods.Items) > 0 {
			_ = r.Client.CoreV1().Pods(r.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods of the run not gone within 2m: %w", err)
	}
	return nil
}

// describe is the state for a report: every pod with its record and what
// the kubelet gave it, every node's cards in the inventory, the extender
// and the kubelet.
func (r *Runner) describe(obs *Observation) string {
	if obs == nil {
		return "  (no observation)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  observed at %.3fs\n", obs.At.Sub(r.start).Seconds())
	invs := inventories(obs)
	for _, name := range sortedKeys(obs.Nodes) {
		n := obs.Nodes[name]
		q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		fmt.Fprintf(&b, "  node %s: allocatable %d, isolate=%q\n", name, q.Value(), n.Annotations[api.DefaultNames().AnnotationIsolation()])
		perCard := map[string]int{}
		if acc, ok := obs.Kubelet[name]; ok {
			for _, ctrs := range acc.Containers {
				for _, ids := range ctrs {
					for _, id := range ids {
						if uuid, _, err := api.ParseUnitID(id); err == nil {
							perCard[uuid]++
						}
					}
				}
			}
		}
		ext := map[string]api.ExtenderCard{}
		for _, c := range obs.Extender[name].Cards {
			ext[c.UUID] = c
		}
		for _, c := range invs[name].Cards {
			kub := "?"
			if _, ok := obs.Kubelet[name]; ok {
				kub = fmt.Sprint(perCard[c.UUID])
			}
			e := "?"
			if ec, ok := ext[c.UUID]; ok {
				e = fmt.Sprintf("%d/%d", ec.Used, ec.Capacity)
			}
			fmt.Fprintf(&b, "    card %d %s %s units %d: kubelet holds %s, extender %s\n", c.Index, c.UUID, c.State, c.Units, kub, e)
		}
		if err := obs.KubeletErr[name]; err != nil {
			fmt.Fprintf(&b, "    PodResources: %v\n", err)
		}
	}
	if obs.ExtenderErr != nil {
		fmt.Fprintf(&b, "  extender: %v\n", obs.ExtenderErr)
	}
	pods := append([]corev1.Pod(nil), obs.Pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for i := range pods {
		p := &pods[i]
		line := fmt.Sprintf("  pod %s node=%q phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
		if p.DeletionTimestamp != nil {
			line += " deleting"
		}
		if asg, err := api.DefaultNames().AssignmentFromPod(p); err == nil {
			var parts []string
			for _, c := range asg.Containers {
				parts = append(parts, fmt.Sprintf("%s→card %d %s ×%d", c.Name, c.CardIndex, c.CardUUID, c.Units))
			}
			line += fmt.Sprintf(" record[%s %s]", asg.Phase, strings.Join(parts, ", "))
		} else if !errors.Is(err, api.ErrNoAssignment) {
			line += fmt.Sprintf(" record error: %v", err)
		}
		if recs, err := recordsOf(p); err == nil {
			line += fmt.Sprintf(" kubelet[%s]", strings.Join(recs, ", "))
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				line += fmt.Sprintf(" unscheduled(%s: %s)", c.Reason, shorten(c.Message))
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			line += fmt.Sprintf(" failed(%s: %s)", p.Status.Reason, shorten(p.Status.Message))
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return shorten(s)
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
