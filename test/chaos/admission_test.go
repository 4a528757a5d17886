package chaos

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func rejectedPod(created time.Time, msg string) *corev1.Pod {
	return rejected(created, msg).Obj()
}

func rejected(created time.Time, msg string) *podtest.Builder {
	return podtest.Make("", "p").UID("").Node("n1").Created(created).Failed(admissionFailure, msg)
}

func TestAdmissionCause(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	seen := t0.Add(time.Minute)
	unhealthy := "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu-mem, which is unexpected"
	for _, tc := range []struct {
		name      string
		msg       string
		events    []NodeEvent
		wholeHeld bool
		want      Cause
	}{
		{"the plugin died during the call", "Allocate failed due to rpc error: code = Unavailable desc = error reading from server: EOF, which is unexpected", nil, false, CauseCallCut},
		{"the plugin died during the call while its standby served", "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Unavailable desc = error reading from server: EOF, which is unexpected", []NodeEvent{{At: seen.Add(-time.Second), Kind: KindKillPlugin, Covered: true}}, false, CauseCallCut},
		{"a plugin kill its standby covered is not the cause", unhealthy, []NodeEvent{{At: t0.Add(time.Second), Kind: KindIsolate, Isolated: true}, {At: seen.Add(-time.Second), Kind: KindKillPlugin, Covered: true}}, false, CauseIsolation},
		{"an uncovered kill before a covered one is", unhealthy, []NodeEvent{{At: seen.Add(-5 * time.Second), Kind: KindKillPlugin}, {At: seen.Add(-time.Second), Kind: KindKillPlugin, Covered: true}}, false, CauseRestart},
		{"plugin killed 10 s before", unhealthy, []NodeEvent{{At: seen.Add(-10 * time.Second), Kind: KindKillPlugin}}, false, CauseRestart},
		{"agent killed 30 s before", unhealthy, []NodeEvent{{At: seen.Add(-RestartWindow), Kind: KindKillAgent}}, false, CauseKubeletRestart},
		{"the latest kill names the restart", unhealthy, []NodeEvent{{At: seen.Add(-2 * time.Second), Kind: KindKillAgent}, {At: seen.Add(-9 * time.Second), Kind: KindKillPlugin}}, false, CauseKubeletRestart},
		{"the latest kill names the restart, plugin", unhealthy, []NodeEvent{{At: seen.Add(-9 * time.Second), Kind: KindKillAgent}, {At: seen.Add(-2 * time.Second), Kind: KindKillPlugin}}, false, CauseRestart},
		{"a kill long before is not the cause", unhealthy, []NodeEvent{{At: seen.Add(-RestartWindow - time.Second), Kind: KindKillPlugin}}, false, CauseOther},
		{"a kill after the rejection was seen is not the cause", unhealthy, []NodeEvent{{At: seen.Add(time.Second), Kind: KindKillPlugin}}, false, CauseOther},
		{"an extender restart is not the node's", unhealthy, []NodeEvent{{At: seen.Add(-time.Second), Kind: KindKillExtender}}, false, CauseOther},
		{"cards isolated after the pod was created", unhealthy, []NodeEvent{{At: t0.Add(time.Second), Kind: KindIsolate, Isolated: true}}, false, CauseIsolation},
		{"isolated before the pod existed", unhealthy, []NodeEvent{{At: t0.Add(-time.Second), Kind: KindIsolate, Isolated: true}}, false, CauseOther},
		{"an isolation lifted is not the cause", unhealthy, []NodeEvent{{At: t0.Add(time.Second), Kind: KindIsolate}}, false, CauseOther},
		{"whole cards held on the node", unhealthy, nil, true, CauseWholeHold},
		{"a restart explains it before an isolation or a hold", unhealthy, []NodeEvent{{At: t0.Add(time.Second), Kind: KindIsolate, Isolated: true}, {At: seen.Add(-time.Second), Kind: KindKillPlugin}}, true, CauseRestart},
		{"cards isolated after the latest kill explain it, not the kill", unhealthy, []NodeEvent{{At: seen.Add(-12 * time.Second), Kind: KindKillAgent}, {At: seen.Add(-time.Second), Kind: KindIsolate, Isolated: true}}, false, CauseIsolation},
		{"an isolation before a hold", unhealthy, []NodeEvent{{At: t0.Add(time.Second), Kind: KindWriters, Isolated: true}}, true, CauseIsolation},
		{"nothing known", "Allocate failed due to requested number of devices unavailable for example.com/gpu-mem. Requested: 4, Available: 2, which is unexpected", nil, false, CauseOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AdmissionCause(rejectedPod(t0, tc.msg), seen, tc.events, tc.wholeHeld); got != tc.want {
				t.Errorf("AdmissionCause = %q, want %q", got, tc.want)
			}
		})
	}
}

// A kubelet restart's rejections split by when the pod was bound: before the kill (the old
// kubelet had not admitted it; no placement could avoid it) or at or after it (a placement into
// the restart's window). The binding time has seconds; the kill's second counts as after.
func TestAdmissionCauseOfAKubeletRestartByBindingTime(t *testing.T) {
	kill := time.Date(2026, 11, 26, 12, 0, 10, 300e6, time.UTC)
	seen := kill.Add(5 * time.Second)
	events := []NodeEvent{{At: kill, Kind: KindKillAgent}}
	msg := "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu-mem, which is unexpected"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want Cause
	}{
		{"bound a second before the kill: queued at the old kubelet", rejected(kill.Add(-5*time.Second), msg).Scheduled(kill.Add(-time.Second).Truncate(time.Second)).Obj(), CauseKubeletRestartQueued},
		{"bound in the kill's second: counted as after", rejected(kill.Add(-5*time.Second), msg).Scheduled(kill.Truncate(time.Second)).Obj(), CauseKubeletRestart},
		{"bound after the kill", rejected(kill, msg).Scheduled(kill.Add(2 * time.Second).Truncate(time.Second)).Obj(), CauseKubeletRestart},
		{"binding time unknown", rejected(kill.Add(-5*time.Second), msg).Obj(), CauseKubeletRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AdmissionCause(tc.pod, seen, events, false); got != tc.want {
				t.Errorf("AdmissionCause = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWholeHeldNodes(t *testing.T) {
	names := api.DefaultNames()
	pod := func(node string, res corev1.ResourceName, phase corev1.PodPhase) corev1.Pod {
		return *podtest.Make("", "").UID("").Node(node).Limit("c", res, resource.MustParse("1")).Phase(phase).Obj()
	}
	got := WholeHeldNodes([]corev1.Pod{
		pod("whole", names.WholeResourceName(), corev1.PodRunning),
		pod("units", names.ResourceName(), corev1.PodRunning),
		pod("finished", names.WholeResourceName(), corev1.PodSucceeded),
		pod("", names.WholeResourceName(), corev1.PodPending),
	}, names)
	if len(got) != 1 || !got["whole"] {
		t.Errorf("WholeHeldNodes = %v, want only the node whose pod holds whole cards and runs", got)
	}
}

func TestCausesText(t *testing.T) {
	if got := causesText(nil); got != "none" {
		t.Errorf("causesText(nil) = %q", got)
	}
	got := causesText(map[Cause]int{CauseOther: 1, CauseRestart: 3, CauseWholeHold: 0})
	if want := "plugin restart 3, other 1"; got != want {
		t.Errorf("causesText = %q, want %q", got, want)
	}
}
