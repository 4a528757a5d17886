package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/admission"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
)

// syncPods finishes the deletion of pods being deleted and admits the pods
// waiting on this node, oldest first (the kubelet's admission order).
func (a *Agent) syncPods(ctx context.Context) {
	logger := klog.FromContext(ctx)
	all, err := a.pods.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing pods")
		return
	}
	var pending []*corev1.Pod
	seen := map[types.UID]bool{}
	for _, p := range all {
		if p.Spec.NodeName != a.cfg.NodeName {
			continue
		}
		seen[p.UID] = true
		switch {
		case p.DeletionTimestamp != nil:
			a.finishDeletion(ctx, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			if !a.isHandled(p.UID) {
				pending = append(pending, p)
			}
		}
	}
	a.forgetExcept(seen)
	// The kubelet receives each bound pod as its own update, in its watch's
	// order, and admits the pods of an update by creation time: for pods
	// created in the same second (a burst), the order they arrived in.
	sort.SliceStable(pending, func(i, j int) bool {
		ti, tj := pending[i].CreationTimestamp, pending[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		if ai, aj := a.arrival(pending[i].UID), a.arrival(pending[j].UID); ai != aj {
			return ai < aj
		}
		return pending[i].Name < pending[j].Name
	})
	for _, p := range pending {
		if ctx.Err() != nil {
			return
		}
		// Admissions take a while (each Allocate is a gRPC call to the
		// plugin): look at the pod as it is now. The kubelet starts no
		// container of a pod that is being deleted or gone.
		cur, err := a.pods.Pods(p.Namespace).Get(p.Name)
		if err != nil || cur.UID != p.UID || cur.DeletionTimestamp != nil {
			continue
		}
		a.setKnown(cur.UID)
		a.admit(ctx, cur)
	}
}

// setKnown adds a pod to the agent's pod manager (see Agent.known).
func (a *Agent) setKnown(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known[uid] = true
}

// knows reports whether the kubelet's pod manager would have the pod: one
// it has begun to admit, or one past admission (the kubelet adds every pod
// it runs; after a restart, the running ones again before anything else).
func (a *Agent) knows(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known[pod.UID]
}

func (a *Agent) isHandled(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handled[uid] || a.starting[uid]
}

func (a *Agent) setHandled(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handled[uid] = true
}

func (a *Agent) forgetExcept(seen map[types.UID]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid := range a.handled {
		if !seen[uid] {
			delete(a.handled, uid)
		}
	}
	for uid := range a.known {
		if !seen[uid] {
			delete(a.known, uid)
		}
	}
	for uid := range a.arrived {
		if !seen[uid] {
			delete(a.arrived, uid)
		}
	}
}

// admit does what the kubelet does for a new pod, minus the containers:
// Allocate for every container (init containers first), then the run options
// each container would get. A failed Allocate rejects the pod the kubelet's
// way (Failed, UnexpectedAdmissionError); otherwise the agent records the run
// options on the pod and reports it Running.
func (a *Agent) admit(ctx context.Context, pod *corev1.Pod) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	containers := make([]*corev1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		containers = append(containers, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		containers = append(containers, &pod.Spec.Containers[i])
	}

	if a.dm != nil {
		for _, c := range containers {
			if err := a.dm.Allocate(pod, c); err != nil {
				result := admission.GetPodAdmitResult(err)
				logger.Info("Rejecting pod", "container", c.Name, "reason", result.Reason, "message", result.Message)
				a.reject(ctx, pod, result.Reason, result.Message)
				return
			}
		}
	}
	// Admitted. Like the kubelet's pod workers, starting the containers
	// (the device run options, where the device manager calls
	// PreStartContainer; the status) runs beside the admission of the
	// node's next pod, not in front of it.
	a.setStarting(pod.UID, true)
	go a.start(ctx, pod, containers)
}

// start starts an admitted pod's containers (simulated) and reports it
// Running; a failed step leaves it to the next sync, which admits it again
// (the device manager answers a container it allocated from its own state).
func (a *Agent) start(ctx context.Context, pod *corev1.Pod, containers []*corev1.Container) {
	defer a.setStarting(pod.UID, false)
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	records := ContainerRecords{Version: RecordVersion, Node: a.cfg.NodeName}
	began := a.cfg.Clock.Now()
	if a.dm != nil {
		for _, c := range containers {
			opts, err := a.dm.GetDeviceRunContainerOptions(pod, c)
			if err != nil {
				// The kubelet would fail to start this container and retry.
				logger.Error(err, "Getting device run options; will retry", "container", c.Name)
				a.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: device run options of container %s: %v", c.Name, err)
				return
			}
			records.Containers = append(records.Containers, newContainerRecord(c.Name, a.dm.GetDevices(string(pod.UID), c.Name), opts))
		}
	}
	// A pod deleted while it was being admitted is not started: the kubelet
	// starts no container of a pod being deleted, and the device manager may
	// already have released its devices (the run options would be empty).
	if cur, err := a.pods.Pods(pod.Namespace).Get(pod.Name); err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
		logger.V(2).Info("Pod deleted during admission; not starting it")
		return
	}
	options := a.cfg.Clock.Since(began)
	if !a.cfg.NoContainerRecords {
		value, err := records.Encode()
		if err != nil {
			logger.Error(err, "Encoding container records")
			return
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{api.DefaultNames().AnnotationSimulatedContainers(): value},
		}})
		if _, err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			logger.Error(err, "Recording container run options on the pod; will retry")
			return
		}
	}
	annotated := a.cfg.Clock.Since(began)
	if err := a.patchPodStatus(ctx, pod, runningStatus(pod, a.cfg.Clock.Now())); err != nil {
		logger.Error(err, "Reporting pod Running; will retry")
		return
	}
	reported := a.cfg.Clock.Since(began)
	a.setHandled(pod.UID)
	a.recorder.Event(pod, corev1.EventTypeNormal, "Started", "Started all containers (simulated by the gpushare node agent)")
	if err := a.startGPUProcesses(ctx, pod, a.cardOf(ctx, pod)); err != nil {
		logger.Error(err, "Starting the pod's GPU processes")
		a.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "GPU processes: %v", err)
	}
	// How long each step took: the device run options (PreStartContainer),
	// recording them on the pod, and the status.
	logger.Info("Pod running", "containers", len(records.Containers), "runOptions", options.Round(time.Millisecond),
		"annotated", (annotated - options).Round(time.Millisecond), "status", (reported - annotated).Round(time.Millisecond))
}

// reject marks the pod Failed with the kubelet's reason and message, and
// emits the event the kubelet emits.
func (a *Agent) reject(ctx context.Context, pod *corev1.Pod, reason, message string) {
	a.recorder.Event(pod, corev1.EventTypeWarning, reason, message)
	st := corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: message}
	if err := a.patchPodStatus(ctx, pod, st); err != nil {
		klog.FromContext(ctx).Error(err, "Rejecting pod; will retry", "pod", klog.KObj(pod))
		return
	}
	a.setHandled(pod.UID)
}

func runningStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		StartTime: &t,
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: t, FinishedAt: t}},
		})
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return st
}

// containerID is the container's ID in its status, as containerd reports it
// ("containerd://" and 64 hex digits): the device plugin matches it with the
// container's cgroup (gpuuse.go).
func containerID(pod *corev1.Pod, name string) string {
	return "containerd://" + simContainerID(pod, name)
}

// cardOf gives the index of the card the device manager gave a container of
// the pod (-1: none).
func (a *Agent) cardOf(ctx context.Context, pod *corev1.Pod) func(string) int {
	return func(container string) int {
		if a.dm == nil {
			return -1
		}
		for _, devs := range a.dm.GetDevices(string(pod.UID), container) {
			for devID := range devs {
				uuid, _, err := api.ParseUnitID(devID)
				if err != nil {
					continue
				}
				if i, ok := a.cardIndexes(ctx)[uuid]; ok {
					return i
				}
			}
		}
		return -1
	}
}

// patchPodStatus writes st on the pod's status subresource with a strategic
// merge patch (conditions merge by type, so PodScheduled stays).
func (a *Agent) patchPodStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   st,
	})
	if err != nil {
		return fmt.Errorf("encode pod status: %w", err)
	}
	_, err = a.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// finishDeletion plays the kubelet's part of a pod deletion: the pod's GPU
// processes get SIGTERM and, those that outlive the deletion's grace period
// (until DeletionTimestamp), SIGKILL; then the pod is removed (grace period
// 0, only this very pod) and its devices are released in the device
// manager. A pod without GPU processes stops at once.
func (a *Agent) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	if a.gpu != nil && a.cfg.Clock.Now().Before(pod.DeletionTimestamp.Time) && a.gpu.terminatePod(pod.UID) {
		return // the next sync looks again
	}
	err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Finishing pod deletion; will retry", "pod", klog.KObj(pod))
		return
	}
	if a.dm != nil {
		a.dm.UpdateAllocatedDevices()
	}
	if a.gpu != nil {
		a.gpu.stopPod(pod.UID)
	}
	klog.FromContext(ctx).V(2).Info("Pod deleted", "pod", klog.KObj(pod))
}

// setStarting marks a pod whose containers start (Agent.start) so that the
// syncs meanwhile do not admit it again.
func (a *Agent) setStarting(uid types.UID, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if on {
		a.starting[uid] = true
	} else {
		delete(a.starting, uid)
	}
}

// arrive records that the agent's watch saw the pod bound here.
func (a *Agent) arrive(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.arrived[uid]; !ok {
		a.arrivals++
		a.arrived[uid] = a.arrivals
	}
}

// arrival is the pod's place in the order the agent saw pods bound.
func (a *Agent) arrival(uid types.UID) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.arrived[uid]
}
