package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// PollInterval is how often the wait helpers look.
const PollInterval = 200 * time.Millisecond

// WaitNode polls the Node until cond holds or timeout passes; the error says
// what was last seen.
func WaitNode(ctx context.Context, c kubernetes.Interface, name string, timeout time.Duration, what string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	var last *corev1.Node
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		return last, fmt.Errorf("node %s not %s within %v (last error: %v; last status: %s): %w", name, what, timeout, lastErr, describeNode(last), err)
	}
	return last, nil
}

// NodeReady: the Ready condition is True and the not-ready taint is gone
// (the node lifecycle controller removes it once it sees Ready).
func NodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitPod polls the Pod until cond holds or timeout passes.
func WaitPod(ctx context.Context, c kubernetes.Interface, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var last *corev1.Pod
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		return last, fmt.Errorf("pod %s/%s not %s within %v (last error: %v; last status: %s): %w", ns, name, what, timeout, lastErr, describePod(last), err)
	}
	return last, nil
}

// WaitPodGone polls until the pod no longer exists.
func WaitPodGone(ctx context.Context, c kubernetes.Interface, ns, name string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// PodRunning: the pod is bound and Running.
func PodRunning(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
}

func describeNode(n *corev1.Node) string {
	if n == nil {
		return "none"
	}
	return fmt.Sprintf("conditions=%v taints=%v allocatable=%v", n.Status.Conditions, n.Spec.Taints, n.Status.Allocatable)
}

func describePod(p *corev1.Pod) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("node=%q phase=%s reason=%q message=%q conditions=%v", p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.Conditions)
}

// ReadyMessage is the message of the node's Ready condition (the node agent
// names its process there; see WaitNodeAgentReplaced).
func ReadyMessage(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Message
		}
	}
	return ""
}

// WaitNodeAgentReplaced waits until the node's status was posted by an agent
// other than the one whose Ready message was before, and cond holds. Use it
// after restarting an agent: until the new agent posts, the Node still shows
// the old agent's status (capacity included).
func WaitNodeAgentReplaced(ctx context.Context, c kubernetes.Interface, name, before string, timeout time.Duration, what string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	return WaitNode(ctx, c, name, timeout, "posted by the new agent and "+what, func(n *corev1.Node) bool {
		return ReadyMessage(n) != before && cond(n)
	})
}
