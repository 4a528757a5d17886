package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Event reasons the Enforcer records on pods.
const (
	ReasonOverGrant = "GPUMemoryOverGrant"
	ReasonEvicted   = "GPUMemoryOverGrantEvicted"
	ReasonKilled    = "GPUMemoryOverGrantKilled"
)

// KubeActions are the Enforcer's real effects: Events and Evictions
// through the API server, SIGKILL through Signal.
type KubeActions struct {
	Client kubernetes.Interface
	// Node is the node's name (the Event's source host).
	Node string
	// Proc is the host's /proc: a PID is killed only while its cgroup still
	// names the pod (a PID that exited and was reused is left alone).
	Proc string
	// Signal sends SIGKILL to a PID (syscall.Kill in production).
	Signal func(pid int) error
	Now    func() time.Time
	// EvictGrace bounds the termination grace an eviction grants
	// (EvictionGrace): --memory-evict-grace.
	EvictGrace time.Duration
	// Labels go on its Events and Evictions (api.Names.LabelDevicePlugin).
	Labels map[string]string
}

// EvictionGrace is the termination grace, in seconds, that an eviction for
// GPU memory grants a pod: its own terminationGracePeriodSeconds (podGrace;
// nil: Kubernetes' default of 30 s), at most bound, rounded down to whole
// seconds. A pod asking for a day (86400) with a bound of 30 s gets 30 s; a
// pod asking for 5 s gets 5 s.
func EvictionGrace(podGrace *int64, bound time.Duration) int64 {
	g := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if podGrace != nil {
		g = max(*podGrace, 0)
	}
	return min(g, int64(bound/time.Second))
}

// SignalKill is the production Signal.
func SignalKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// Report implements Actions: a Warning Event on the pod.
func (k KubeActions) Report(ctx context.Context, v Verdict, action string) error {
	u := v.Usage
	reason := ReasonOverGrant
	what := "reported only (--memory-enforcement=report)"
	switch {
	case action == string(ModeEvict):
		reason, what = ReasonEvicted, fmt.Sprintf("the pod was evicted with a termination grace of %ds (--memory-enforcement=evict); request more GPU memory or keep within the grant", EvictionGrace(u.TerminationGrace, k.EvictGrace))
	case v.Escalation == EscalateRefused:
		reason, what = ReasonKilled, fmt.Sprintf("its pod's eviction was refused (a PodDisruptionBudget allows no disruption now), so its processes %v on the card were killed: a disruption budget does not exempt a pod from its GPU memory grant; request more GPU memory or keep within the grant", u.PIDs)
	case v.Escalation == EscalateOutlived:
		reason, what = ReasonKilled, fmt.Sprintf("its pod was evicted at %s and it still held the memory, so its processes %v on the card were killed (a process that ignores SIGTERM keeps no memory past the eviction's grace); request more GPU memory or keep within the grant", v.EvictedAt.UTC().Format(time.RFC3339), u.PIDs)
	case action == string(ModeKill):
		reason, what = ReasonKilled, fmt.Sprintf("its processes %v on the card were killed (--memory-enforcement=kill); request more GPU memory or keep within the grant", u.PIDs)
	}
	grant := "no grant on this card"
	if u.Grant {
		grant = "was granted " + bytesString(u.GrantedBytes)
	}
	container := u.Ref.Container
	container = cmp.Or(container, "(not yet named in the pod status)")
	used := bytesString(u.UsedBytes)
	if u.Shared != nil {
		// Containers naming one claim share its memory and are measured together.
		used = fmt.Sprintf("%s (with the containers sharing its claim, %v: %s)", used, u.Shared.Containers, bytesString(u.Shared.UsedBytes))
		grant = "they were granted " + bytesString(u.Shared.GrantedBytes) + " together"
	}
	msg := fmt.Sprintf("container %s uses %s of GPU memory on card %s and %s (allowed with tolerance: %s) since %s, over it for %s in all (time within the grant pays back a quarter of its length): %s",
		container, used, u.Card, grant, bytesString(v.AllowedBytes), v.Since.UTC().Format(time.RFC3339), v.OverFor.Round(time.Second), what)
	now := metav1.NewTime(k.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: u.Ref.Pod + ".", Namespace: u.Ref.Namespace, Labels: k.Labels},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: u.Ref.Namespace, Name: u.Ref.Pod, UID: u.Ref.UID},
		Reason:         reason,
		Message:        msg,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "gpushare-device-plugin", Host: k.Node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if u.Ref.Container != "" {
		ev.InvolvedObject.FieldPath = "spec.containers{" + u.Ref.Container + "}"
	}
	if _, err := k.Client.CoreV1().Events(u.Ref.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("event on pod %s/%s: %w", u.Ref.Namespace, u.Ref.Pod, err)
	}
	return nil
}

// Evict implements Actions through the Eviction API (policy/v1), with the
// pod's UID as a precondition (a re-created pod of the same name is not
// touched) and a termination grace of at most EvictGrace (EvictionGrace).
// 429 (a disruption budget allows none now) is ErrRetryLater; a pod already
// gone is done.
func (k KubeActions) Evict(ctx context.Context, v Verdict) error {
	u := v.Usage
	err := k.Client.PolicyV1().Evictions(u.Ref.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: u.Ref.Namespace, Name: u.Ref.Pod, Labels: k.Labels},
		DeleteOptions: &metav1.DeleteOptions{
			Preconditions:      &metav1.Preconditions{UID: &u.Ref.UID},
			GracePeriodSeconds: ptr.To(EvictionGrace(u.TerminationGrace, k.EvictGrace)),
		},
	})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("evicting pod %s/%s: %w: %v", u.Ref.Namespace, u.Ref.Pod, ErrRetryLater, err)
	}
	return fmt.Errorf("evicting pod %s/%s: %w", u.Ref.Namespace, u.Ref.Pod, err)
}

// Kill implements Actions: SIGKILL to each of the container's processes on
// the card whose cgroup still names the pod. A process that is gone is not
// an error.
func (k KubeActions) Kill(_ context.Context, v Verdict) error {
	var errs []error
	for _, pid := range v.Usage.PIDs {
		o, err := OwnerOf(k.Proc, pid)
		if errors.Is(err, ErrGone) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if o.PodUID != v.Usage.Ref.UID {
			continue // exited, and the PID now belongs to someone else
		}
		if err := k.Signal(int(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("SIGKILL pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// bytesString prints bytes in binary units: 1.5Gi is "1536Mi".
func bytesString(b int64) string {
	if b%(1<<30) == 0 || b >= 100<<30 {
		return resource.NewQuantity(b/(1<<30)*(1<<30), resource.BinarySI).String()
	}
	return strings.TrimSpace(resource.NewQuantity(b/(1<<20)*(1<<20), resource.BinarySI).String())
}
