package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// PluginPod is the device plugin's pod as the chart's DaemonSet runs it:
// the agent creates it on its node (name "device-plugin-<node>") and keeps
// its Ready condition as the kubelet would from the plugin's readiness
// probe: Ready while the device manager holds healthy devices from the
// plugin (the plugin's /readyz answers 200 once the kubelet streams them),
// not Ready from the moment the plugin is gone until its successor
// registered. The scheduler extender reads it (--device-plugin-selector).
type PluginPod struct {
	Namespace string
	Labels    map[string]string
	// Period is how often readiness is looked at (default 1 s, the
	// kubelet's PLEG relist period: a real kubelet notices a dead
	// container no sooner).
	Period time.Duration
}

// pluginPodName is the plugin pod's name on node.
func pluginPodName(node string) string { return "device-plugin-" + node }

// runPluginPod creates the plugin's pod and keeps its Ready condition until
// ctx ends.
func (a *Agent) runPluginPod(ctx context.Context, pp *PluginPod) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(pp.Namespace, pluginPodName(a.cfg.NodeName)))
	period := pp.Period
	if period <= 0 {
		period = time.Second
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pp.Namespace, Name: pluginPodName(a.cfg.NodeName), Labels: pp.Labels},
		Spec: corev1.PodSpec{
			NodeName:   a.cfg.NodeName,
			Containers: []corev1.Container{{Name: "device-plugin", Image: "gpushare-device-plugin"}},
		},
	}
	_ = wait.PollUntilContextCancel(ctx, period, true, func(ctx context.Context) (bool, error) {
		_, err := a.cfg.Client.CoreV1().Pods(pp.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			logger.Error(err, "Creating the device plugin's pod")
			return false, nil
		}
		return true, nil
	})
	_ = wait.PollUntilContextCancel(ctx, period, true, func(ctx context.Context) (bool, error) {
		cur, err := a.pods.Pods(pp.Namespace).Get(pod.Name)
		if err != nil || cur.Status.Phase != corev1.PodRunning {
			return false, nil // not admitted yet (syncPods starts it)
		}
		want := corev1.ConditionFalse
		if a.pluginServes() {
			want = corev1.ConditionTrue
		}
		if c := podutil.GetPodReadyCondition(cur.Status); c != nil && c.Status == want {
			return false, nil
		}
		if err := a.setPodReady(ctx, cur, want); err != nil {
			logger.Error(err, "Setting the device plugin pod's readiness")
			return false, nil
		}
		logger.Info("Device plugin pod readiness", "ready", want)
		return false, nil
	})
}

// pluginServes reports whether the device manager holds healthy devices:
// the plugin is registered and has streamed them.
func (a *Agent) pluginServes() bool {
	for _, devs := range a.dm.GetAllocatableDevices() {
		if len(devs) > 0 {
			return true
		}
	}
	return false
}

// setPodReady patches the pod's Ready and ContainersReady conditions.
func (a *Agent) setPodReady(ctx context.Context, pod *corev1.Pod, st corev1.ConditionStatus) error {
	now := metav1.NewTime(a.cfg.Clock.Now())
	status := corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}}
	if err := a.patchPodStatus(ctx, pod, status); err != nil {
		return fmt.Errorf("device plugin pod readiness: %w", err)
	}
	return nil
}
