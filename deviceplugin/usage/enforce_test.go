package usage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
)

// recorder is a fake Actions that records calls as "action ns/pod/container".
type recorder struct {
	calls    []string
	evictErr []error // returned by successive Evict calls
}

func (r *recorder) Report(_ context.Context, v Verdict, action string) error {
	r.calls = append(r.calls, "event("+strings.TrimSpace(action+" "+string(v.Escalation))+") "+v.Usage.Ref.String())
	return nil
}

func (r *recorder) Evict(_ context.Context, v Verdict) error {
	r.calls = append(r.calls, "evict "+v.Usage.Ref.String())
	if len(r.evictErr) > 0 {
		err := r.evictErr[0]
		r.evictErr = r.evictErr[1:]
		return err
	}
	return nil
}

func (r *recorder) Kill(_ context.Context, v Verdict) error {
	r.calls = append(r.calls, fmt.Sprintf("kill %v", v.Usage.PIDs))
	return nil
}

func TestEnforcerModes(t *testing.T) {
	over := Sample{Time: t0, Cards: []CardSample{{UUID: "GPU-0"}}, Usages: []Usage{
		{Card: "GPU-0", Ref: podA, Grant: true, GrantedBytes: 10 * gib, UsedBytes: 20 * gib, PIDs: []uint32{11, 12}},
		{Card: "GPU-0", Ref: podB, Grant: true, GrantedBytes: 20 * gib, UsedBytes: 20 * gib, PIDs: []uint32{21}},
		{Card: "GPU-0", Ref: Ref{}, UsedBytes: 30 * gib, PIDs: []uint32{1}},
	}}
	tests := []struct {
		mode      Mode
		evictErr  []error
		want      []string
		wantCount []Outcome
	}{
		{mode: ModeOff},
		{mode: ModeReport, want: []string{"event(report) ns/a/train"}, wantCount: []Outcome{{"report", "done"}}},
		{mode: ModeEvict, want: []string{"evict ns/a/train", "event(evict) ns/a/train"}, wantCount: []Outcome{{"evict", "done"}}},
		{
			mode:     ModeEvict,
			evictErr: []error{fmt.Errorf("x: %w", ErrRetryLater)},
			// a disruption budget refuses the eviction: killed at once, and
			// the Event says why
			want:      []string{"evict ns/a/train", "kill [11 12]", "event(kill eviction-refused) ns/a/train"},
			wantCount: []Outcome{{"evict", "refused"}, {"kill", "done"}},
		},
		{mode: ModeKill, want: []string{"kill [11 12]", "event(kill) ns/a/train"}, wantCount: []Outcome{{"kill", "done"}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.mode, tt.evictErr), func(t *testing.T) {
			r := &recorder{evictErr: tt.evictErr}
			var counts []Outcome
			e := &Enforcer{Mode: tt.mode, Policy: Policy{Grace: 0}, Actions: r, Log: klog.Background(), Count: func(o Outcome) { counts = append(counts, o) }}
			for i := 0; i < 3; i++ { // three sweeps of the same sample: acted on once
				s := over
				s.Time = t0.Add(time.Duration(i) * 5 * time.Second)
				e.Observe(context.Background(), s)
			}
			if d := cmp.Diff(tt.want, r.calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantCount, counts); d != "" {
				t.Errorf("outcomes (-want +got):\n%s", d)
			}
		})
	}
}

func TestEnforcerEvictsAPodOnceForTwoContainersOver(t *testing.T) {
	second := podA
	second.Container = "helper"
	s := Sample{Time: t0, Cards: []CardSample{{UUID: "GPU-0"}}, Usages: []Usage{
		{Card: "GPU-0", Ref: podA, Grant: true, GrantedBytes: gib, UsedBytes: 2 * gib},
		{Card: "GPU-0", Ref: second, Grant: true, GrantedBytes: gib, UsedBytes: 2 * gib},
	}}
	r := &recorder{}
	var counts []Outcome
	e := &Enforcer{Mode: ModeEvict, Actions: r, Log: klog.Background(), Count: func(o Outcome) { counts = append(counts, o) }}
	e.Observe(context.Background(), s)
	s.Time = s.Time.Add(5 * time.Second)
	e.Observe(context.Background(), s)
	if d := cmp.Diff([]string{"evict ns/a/train", "event(evict) ns/a/train"}, r.calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]Outcome{{"evict", "done"}}, counts); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
}

// A pod evicted that keeps the memory (it ignores SIGTERM) has its
// processes on the card killed KillAfter after the eviction, with an Event
// saying why.
func TestEnforcerKillsWhatOutlivesItsEviction(t *testing.T) {
	s := Sample{Time: t0, Cards: []CardSample{{UUID: "GPU-0"}}, Usages: []Usage{
		{Card: "GPU-0", Ref: podA, Grant: true, GrantedBytes: gib, UsedBytes: 2 * gib, PIDs: []uint32{7}},
	}}
	r := &recorder{}
	var counts []Outcome
	e := &Enforcer{Mode: ModeEvict, Policy: Policy{KillAfter: 10 * time.Second}, Actions: r, Log: klog.Background(), Count: func(o Outcome) { counts = append(counts, o) }}
	for i := 0; i <= 4; i++ { // every 5 s: evicted at 0 s, killed at 10 s, nothing more
		s.Time = t0.Add(time.Duration(i) * 5 * time.Second)
		e.Observe(context.Background(), s)
	}
	if d := cmp.Diff([]string{"evict ns/a/train", "event(evict) ns/a/train", "kill [7]", "event(kill outlived-eviction) ns/a/train"}, r.calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]Outcome{{"evict", "done"}, {"kill", "done"}}, counts); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "report", "evict", "kill"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("delete"); err == nil || !strings.Contains(err.Error(), "use off, report, evict or kill") {
		t.Errorf("ParseMode(delete) err = %v", err)
	}
}

func verdictFor(r Ref, pids ...uint32) Verdict {
	return Verdict{Usage: Usage{Card: "GPU-0", Ref: r, Grant: true, GrantedBytes: 10 * gib, UsedBytes: 12 * gib, PIDs: pids}, AllowedBytes: 10*gib + gib/2, Since: t0}
}

// pluginLabel is the label the device plugin puts on its Events and
// Evictions about pods, which the chart's admission policies check.
var pluginLabel = map[string]string{api.DefaultNames().LabelDevicePlugin(): "node-a"}

func TestKubeActionsReportRecordsAWarningEvent(t *testing.T) {
	c := fake.NewClientset()
	k := KubeActions{Client: c, Node: "node-a", Now: func() time.Time { return t0 }, Labels: pluginLabel}
	if err := k.Report(context.Background(), verdictFor(podA, 7), "report"); err != nil {
		t.Fatal(err)
	}
	evs, err := c.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(evs.Items) != 1 {
		t.Fatalf("events = %v, %v; want one", evs, err)
	}
	ev := evs.Items[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonOverGrant || ev.InvolvedObject.Name != "a" || ev.InvolvedObject.UID != "uid-a" ||
		ev.InvolvedObject.FieldPath != "spec.containers{train}" || ev.Source.Host != "node-a" || !cmp.Equal(ev.Labels, pluginLabel) {
		t.Errorf("event = %+v", ev)
	}
	for _, s := range []string{"12Gi", "10Gi", "10752Mi", "GPU-0", "report"} {
		if !strings.Contains(ev.Message, s) {
			t.Errorf("message %q lacks %q", ev.Message, s)
		}
	}
}

func TestKubeActionsEvict(t *testing.T) {
	tests := []struct {
		name      string
		reactErr  error
		wantRetry bool
		wantErr   bool
	}{
		{name: "evicted"},
		{name: "a disruption budget refuses (429): retry later", reactErr: apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10), wantRetry: true, wantErr: true},
		{name: "the pod is already gone", reactErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")},
		{name: "forbidden is an error, not a retry", reactErr: apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a", errors.New("no RBAC")), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			var got *policyv1.Eviction
			c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				got = a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
				return true, nil, tt.reactErr
			})
			v := verdictFor(podA)
			v.Usage.TerminationGrace = ptr.To[int64](86400) // SIGTERM trapped for a day
			err := KubeActions{Client: c, EvictGrace: 30 * time.Second, Labels: pluginLabel}.Evict(context.Background(), v)
			if (err != nil) != tt.wantErr || errors.Is(err, ErrRetryLater) != tt.wantRetry {
				t.Fatalf("err = %v, want error %v, retry %v", err, tt.wantErr, tt.wantRetry)
			}
			if got == nil || got.Name != "a" || got.Namespace != "ns" || got.DeleteOptions.Preconditions == nil || *got.DeleteOptions.Preconditions.UID != "uid-a" {
				t.Errorf("eviction = %+v, want pod ns/a with its UID as precondition", got)
			}
			if got != nil && !cmp.Equal(got.Labels, pluginLabel) {
				t.Errorf("eviction labels = %v, want %v (the admission policy checks only labelled evictions' pods, and refuses the plugin's unlabelled ones)", got.Labels, pluginLabel)
			}
			if got != nil && ptr.Deref(got.DeleteOptions.GracePeriodSeconds, -1) != 30 {
				t.Errorf("eviction grace = %v, want 30 s (the bound), not the pod's day", got.DeleteOptions.GracePeriodSeconds)
			}
		})
	}
}

func TestKubeActionsKillOnlyThePodsLiveProcesses(t *testing.T) {
	n := newNode(t, 1)
	a := n.pod("a", "train")
	other := n.pod("other", "x")
	n.run(100, a, 0, 0, gib)
	n.run(101, other, 0, 0, gib) // PID 101 exited and was reused by another pod
	// PID 102 has exited: no /proc entry
	var killed []int
	k := KubeActions{Proc: n.proc, Signal: func(pid int) error { killed = append(killed, pid); return nil }}
	if err := k.Kill(context.Background(), verdictFor(ref(a, "train"), 100, 101, 102)); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{100}, killed); d != "" {
		t.Errorf("killed (-want +got):\n%s", d)
	}
}
