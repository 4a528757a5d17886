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
// the agent creates it on its node (name "device-plugin-<node>"), with a
// container per plugin process ("device-plugin", and "device-plugin-standby"
// with Config.Standby), and keeps each container's readiness as the kubelet
// would from the plugin's readiness probe: ready while its process runs and
// the device manager holds healthy devices (the plugin's /readyz answers 200
// once the kubelet streams them), not ready from the moment the process is
// gone until its successor runs; the pod is Ready when all its containers
// are. The scheduler extender reads it (--device-plugin-selector).
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
	containers := []corev1.Container{{Name: "device-plugin", Image: "gpushare-device-plugin"}}
	procs := []*PluginCommand{a.cfg.Plugin}
	if a.cfg.Standby != nil {
		containers = append(containers, corev1.Container{Name: "device-plugin-standby", Image: "gpushare-device-plugin"})
		procs = append(procs, a.cfg.Standby)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pp.Namespace, Name: pluginPodName(a.cfg.NodeName), Labels: pp.Labels},
		Spec:       corev1.PodSpec{NodeName: a.cfg.NodeName, Containers: containers},
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
		serves := a.pluginServes()
		ready := make([]bool, len(procs))
		for i, p := range procs {
			_, alive := p.livePID()
			ready[i] = alive && serves
		}
		if podReadiness(cur, ready) {
			return false, nil
		}
		if err := a.setPodReady(ctx, cur, ready); err != nil {
			logger.Error(err, "Setting the device plugin pod's readiness")
			return false, nil
		}
		logger.Info("Device plugin pod readiness", "containersReady", ready)
		return false, nil
	})
}

// podReadiness reports whether pod's containers (in spec order) are ready as
// ready says, and the pod Ready exactly when all are.
func podReadiness(pod *corev1.Pod, ready []bool) bool {
	all := true
	for i, c := range pod.Spec.Containers {
		all = all && ready[i]
		st, ok := podutil.GetContainerStatus(pod.Status.ContainerStatuses, c.Name)
		if !ok || st.Ready != ready[i] {
			return false
		}
	}
	want := corev1.ConditionFalse
	if all {
		want = corev1.ConditionTrue
	}
	c := podutil.GetPodReadyCondition(pod.Status)
	return c != nil && c.Status == want
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

// setPodReady patches each container's readiness (ready, in spec order; the
// status list is replaced whole, as the kubelet writes it) and the pod's Ready
// and ContainersReady conditions: true when every container is ready.
func (a *Agent) setPodReady(ctx context.Context, pod *corev1.Pod, ready []bool) error {
	now := metav1.NewTime(a.cfg.Clock.Now())
	st := corev1.ConditionTrue
	var statuses []corev1.ContainerStatus
	for i, c := range pod.Spec.Containers {
		cs, _ := podutil.GetContainerStatus(pod.Status.ContainerStatuses, c.Name)
		cs.Name, cs.Ready = c.Name, ready[i]
		if cs.Image == "" {
			cs.Image, cs.ImageID = c.Image, c.Image
		}
		if cs.State == (corev1.ContainerState{}) {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		statuses = append(statuses, cs)
		if !ready[i] {
			st = corev1.ConditionFalse
		}
	}
	status := corev1.PodStatus{ContainerStatuses: statuses, Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}}
	if err := a.patchPodStatus(ctx, pod, status); err != nil {
		return fmt.Errorf("device plugin pod readiness: %w", err)
	}
	return nil
}
