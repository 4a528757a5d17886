package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpushare/gpushare/api"
	corev1 "k8s.io/api/core/v1"
)

// Cause is why, as far as the run can tell, the kubelet rejected a pod at admission.
type Cause string

const (
	// CauseCallCut: the kubelet's message says the plugin's connection broke during the call
	// (Allocate or GetPreferredAllocation): the plugin was killed while it answered for this very
	// pod. The kubelet does not retry an admission; no second plugin can take such a call over.
	CauseCallCut Cause = "plugin killed in the call"
	// CauseRestart: the pod's node had its device plugin killed within RestartWindow before the
	// rejection was first seen (the latest kill of the node's plugin or agent was the plugin's)
	// while no other plugin of the node served the kubelet (NodeEvent.Covered false). The kubelet
	// marks a resource's devices unhealthy while its last plugin is gone.
	CauseRestart Cause = "plugin restart"
	// CauseKubeletRestart: the latest kill within RestartWindow was of the node's agent (the
	// kubelet): the new kubelet admits the pods bound to it before the plugin has registered with
	// it again (its device manager starts with the resource known from its checkpoint and no
	// healthy device). The pod was bound at or after the kill (or its binding time is unknown):
	// a placement made while the node's kubelet was down or had not yet reported its devices.
	CauseKubeletRestart Cause = "kubelet restart"
	// CauseKubeletRestartQueued: as CauseKubeletRestart, but the pod was bound before the kill
	// (its PodScheduled condition, to the second, is before the kill's second): the old kubelet
	// had not admitted it yet, the new one did before the plugin registered. No placement
	// decision could have avoided it.
	CauseKubeletRestartQueued Cause = "kubelet restart, bound before it"
	// CauseIsolation: the pod's node had cards isolated after the pod was created (the extender
	// chose a card the node then took away).
	CauseIsolation Cause = "isolated after bind"
	// CauseWholeHold: a pod holding whole cards was on the node (whole-card holds make the held
	// cards' memory units unhealthy).
	CauseWholeHold Cause = "whole-card hold"
	// CauseOther: none of the above.
	CauseOther Cause = "other"
)

// Causes lists every Cause in the order the summary prints them.
var Causes = []Cause{CauseCallCut, CauseRestart, CauseKubeletRestart, CauseKubeletRestartQueued, CauseIsolation, CauseWholeHold, CauseOther}

// RestartWindow is how long after a kill of a node's plugin or agent a rejection on that node
// counts as the restart's: the restart, the plugin's registration and the kubelet's first
// ListAndWatch answer take a few seconds; the observation that sees the pod Failed comes after the
// next operation.
const RestartWindow = 30 * time.Second

// NodeEvent is an operation the run did to one node, when it did it.
type NodeEvent struct {
	At   time.Time
	Kind Kind
	// Isolated: the operation isolated at least one card (lifting an isolation is not a cause).
	Isolated bool
	// Covered: a plugin kill while another plugin of the node (its standby) was registered with
	// the kubelet: the node's devices stayed healthy, so the kill explains no rejection but the
	// call it cut (CauseCallCut).
	Covered bool
}

// brokenCall are the kubelet's messages for a plugin that died during Allocate or
// GetPreferredAllocation.
var brokenCall = []string{"connection closing", "EOF", "Unavailable", "connection refused"}

// AdmissionCause attributes one rejected pod: seen is when the run first saw it Failed, events
// are its node's NodeEvents, wholeHeld whether a pod holding whole cards was bound to its node
// then. A call the plugin's death cut explains it first; then a restart (the latest kill of the
// node's plugin or agent, a plugin kill its standby covered not counted) unless cards were
// isolated after that kill, then an isolation, and both before a whole-card hold.
func AdmissionCause(p *corev1.Pod, seen time.Time, events []NodeEvent, wholeHeld bool) Cause {
	for _, m := range brokenCall {
		if strings.Contains(p.Status.Message, m) {
			return CauseCallCut
		}
	}
	var latest *NodeEvent
	for i, e := range events {
		if (e.Kind == KindKillPlugin && !e.Covered || e.Kind == KindKillAgent) && !e.At.After(seen) && seen.Sub(e.At) <= RestartWindow &&
			(latest == nil || e.At.After(latest.At)) {
			latest = &events[i]
		}
	}
	created := p.CreationTimestamp.Time
	isolatedAfter := func(t time.Time) bool {
		for _, e := range events {
			if e.Isolated && e.At.After(created) && e.At.After(t) && !e.At.After(seen) {
				return true
			}
		}
		return false
	}
	// An isolation after the kill (and after the pod's creation) is the later, nearer cause: a
	// restart is over within a few seconds, RestartWindow is only its upper bound.
	if latest != nil && !isolatedAfter(latest.At) {
		if latest.Kind == KindKillAgent {
			if bound := boundAt(p); !bound.IsZero() && bound.Before(latest.At.Truncate(time.Second)) {
				return CauseKubeletRestartQueued
			}
			return CauseKubeletRestart
		}
		return CauseRestart
	}
	if isolatedAfter(time.Time{}) {
		return CauseIsolation
	}
	if wholeHeld {
		return CauseWholeHold
	}
	return CauseOther
}

// boundAt is when p was bound (its PodScheduled=True condition's time, to the second); zero when
// unknown.
func boundAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// WholeHeldNodes are the nodes with a pod that holds whole cards (asks for names' whole-card
// resource) and has not finished.
func WholeHeldNodes(pods []corev1.Pod, names api.Names) map[string]bool {
	held := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if len(api.KubeletDemand(p, names.WholeResourceName())) > 0 {
			held[p.Spec.NodeName] = true
		}
	}
	return held
}

// admissionFailure is the kubelet's reason for a pod it rejected for its devices.
const admissionFailure = "UnexpectedAdmissionError"

// causesText is the counts by cause in Causes' order ("restart 3, other 1"), "none" when empty.
func causesText(counts map[Cause]int) string {
	var parts []string
	for _, c := range Causes {
		if counts[c] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, counts[c]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
