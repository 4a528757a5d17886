package usage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

var (
	podA = Ref{Namespace: "ns", Pod: "a", UID: "uid-a", Container: "train"}
	podB = Ref{Namespace: "ns", Pod: "b", UID: "uid-b", Container: "serve"}
	podC = Ref{Namespace: "ns", Pod: "c", UID: "uid-c", Container: "nogrant"}
)

func granted(r Ref, card string, grant, used int64) Usage {
	return Usage{Card: card, Ref: r, Grant: true, GrantedBytes: grant, UsedBytes: used}
}

func ungranted(r Ref, card string, used int64) Usage {
	return Usage{Card: card, Ref: r, UsedBytes: used}
}

func key(r Ref, card string) Key { return Key{UID: r.UID, Container: r.Container, Card: card} }

func TestDecide(t *testing.T) {
	tol5 := Policy{Tolerance: Tolerance{Percent: 5}, Grace: 30 * time.Second}
	type step = decideStep
	tests := []struct {
		name   string
		policy Policy
		steps  []step
	}{
		{
			name:   "over by more than the tolerance for the grace period is due once",
			policy: tol5,
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 29 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 30 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
				{at: 35 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}}, // acted on: not again
			},
		},
		{
			name:   "within the tolerance is never due",
			policy: tol5,
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 10*gib+gib/20)}},
				{at: time.Hour, usages: []Usage{granted(podA, "GPU-0", 10*gib, 10*gib+gib/20)}},
			},
		},
		{
			name:   "dropping back within the grant resets the clock",
			policy: tol5,
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 20 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 9*gib)}},
				{at: 40 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 65 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 70 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
			},
		},
		{
			// Over for 25 s, within the grant for one sample, over again: the
			// dip pays back 1.25 s of the 25 s, so the second run reaches the
			// 30 s grace after 10 s. Resetting at the dip would never act.
			name:   "an over-user that dips for one sample every grace period is caught in its second run",
			policy: tol5,
			steps:  periodic(podA, 5*time.Second, 25*time.Second, 5*time.Second, 2, key(podA, "GPU-0"), 40*time.Second),
		},
		{
			name:   "one spike shorter than the grace period is never due",
			policy: tol5,
			steps:  periodic(podA, 5*time.Second, 25*time.Second, 10*time.Minute, 1, Key{}, 0),
		},
		{
			// Over 10 s of every 60 s (17 %): each minute pays back 12.5 s of
			// the 10 s run up, so the account never grows.
			name:   "short spikes rarer than a fifth of the time are never due",
			policy: tol5,
			steps:  periodic(podA, 5*time.Second, 10*time.Second, 50*time.Second, 20, Key{}, 0),
		},
		{
			name:   "a new episode after dropping back is acted on again",
			policy: Policy{Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 11*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
				{at: 5 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 10*gib)}},
				{at: 10 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 11*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
			},
		},
		{
			name:   "the over-user is due, never its neighbour on the same card",
			policy: Policy{Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 30*gib), granted(podB, "GPU-0", 20*gib, 20*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
			},
		},
		{
			name:   "a pod using a card it holds no grant on is an over-user",
			policy: Policy{Tolerance: Tolerance{Percent: 50}, Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{ungranted(podC, "GPU-0", 1)}, wantDue: []Key{key(podC, "GPU-0")}},
			},
		},
		{
			name:   "a byte tolerance also covers a container without a grant",
			policy: Policy{Tolerance: Tolerance{Bytes: gib}, Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{ungranted(podC, "GPU-0", gib)}},
				{at: time.Second, usages: []Usage{ungranted(podC, "GPU-0", gib+1)}, wantDue: []Key{key(podC, "GPU-0")}},
			},
		},
		{
			name:   "host processes and pods the cache does not know are never due",
			policy: Policy{Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{ungranted(Ref{}, "GPU-0", 40*gib), ungranted(Ref{UID: "uid-gone"}, "GPU-0", 40*gib)}},
			},
		},
		{
			name:   "an unnamed container in a pod with a grant on the card is not due (status lag)",
			policy: Policy{Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{
					granted(podA, "GPU-0", 10*gib, 0),
					ungranted(Ref{Namespace: "ns", Pod: "a", UID: "uid-a"}, "GPU-0", 5*gib),
				}},
			},
		},
		{
			name:   "an unnamed container in a pod without a grant on the card is due",
			policy: Policy{Grace: 0},
			steps: []step{
				{at: 0, usages: []Usage{ungranted(Ref{Namespace: "ns", Pod: "c", UID: "uid-c"}, "GPU-0", 5*gib)}, wantDue: []Key{{UID: "uid-c", Card: "GPU-0"}}},
			},
		},
		{
			name:   "a card NVML could not list neither starts nor resets the clock",
			policy: tol5,
			steps: []step{
				{at: 0, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}},
				{at: 20 * time.Second, failed: "GPU-0"},
				{at: 30 * time.Second, usages: []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}, wantDue: []Key{key(podA, "GPU-0")}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st State
			for i, s := range tt.steps {
				sample := Sample{Time: t0.Add(s.at), Usages: s.usages, Cards: []CardSample{{UUID: "GPU-0"}}}
				if s.failed != "" {
					sample.Cards[0].Err = errors.New("lost")
				}
				var due []Verdict
				st, due = Decide(st, sample, tt.policy)
				var got []Key
				for _, v := range due {
					k := Key{UID: v.Usage.Ref.UID, Container: v.Usage.Ref.Container, Card: v.Usage.Card}
					got = append(got, k)
					o := st[k]
					o.Acted = true // as the Enforcer does after acting
					st[k] = o
				}
				if d := cmp.Diff(s.wantDue, got); d != "" {
					t.Errorf("step %d (+%v): due (-want +got):\n%s", i, s.at, d)
				}
			}
		})
	}
}

func TestParseTolerance(t *testing.T) {
	tests := []struct {
		in      string
		want    Tolerance
		wantErr string
	}{
		{in: "5%", want: Tolerance{Percent: 5}},
		{in: "0", want: Tolerance{}},
		{in: "512Mi", want: Tolerance{Bytes: 512 << 20}},
		{in: "1Gi", want: Tolerance{Bytes: 1 << 30}},
		{in: "-1Gi", wantErr: "non-negative quantity"},
		{in: "five", wantErr: "e.g. 5%"},
		{in: "2.5%", wantErr: "whole percentage"},
	}
	for _, tt := range tests {
		got, err := ParseTolerance(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseTolerance(%q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseTolerance(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	// Worked example from the doc comment: 5% of 10 GiB is 512 MiB.
	if got := (Tolerance{Percent: 5}).Allowed(10 * gib); got != 10*gib+512<<20 {
		t.Errorf("Allowed = %d, want 10 GiB + 512 MiB", got)
	}
}

// periodic is a container sampled every interval that runs over its grant
// for over, then within it for under, repeated runs times; the step at
// dueAt (since t0, if any) wants due.
func periodic(r Ref, interval, over, under time.Duration, runs int, due Key, dueAt time.Duration) []decideStep {
	type step = decideStep
	var steps []step
	at := time.Duration(0)
	for run := 0; run < runs; run++ {
		for end := at + over; at <= end; at += interval {
			st := step{at: at, usages: []Usage{granted(r, "GPU-0", 10*gib, 12*gib)}}
			if due != (Key{}) && at == dueAt {
				st.wantDue = []Key{due}
			}
			steps = append(steps, st)
		}
		for end := at + under - interval; at <= end; at += interval {
			steps = append(steps, step{at: at, usages: []Usage{granted(r, "GPU-0", 10*gib, 9*gib)}})
		}
	}
	return steps
}

// decideStep is one sample of a TestDecide case.
type decideStep struct {
	at      time.Duration // since t0
	usages  []Usage
	failed  string // a card NVML could not list
	wantDue []Key
}

// A container whose pod was evicted and that still holds the memory
// KillAfter later (it ignores SIGTERM, or asked for a day of grace) is due
// again, for a kill; once only, and not before KillAfter, nor when the
// policy trusts evictions (KillAfter 0), nor after it dipped within its grant.
func TestDecideKillsAfterAnEvictionItOutlived(t *testing.T) {
	over := []Usage{granted(podA, "GPU-0", 10*gib, 12*gib)}
	within := []Usage{granted(podA, "GPU-0", 10*gib, 9*gib)}
	type want struct {
		at         time.Duration
		usages     []Usage
		escalation Escalation // "-": not due
	}
	tests := []struct {
		name      string
		killAfter time.Duration
		steps     []want
	}{
		{name: "still over KillAfter after the eviction: killed once", killAfter: 40 * time.Second, steps: []want{
			{0, over, "-"}, {30 * time.Second, over, EscalateNone}, // evicted at 30 s
			{69 * time.Second, over, "-"}, {70 * time.Second, over, EscalateOutlived}, {75 * time.Second, over, "-"},
		}},
		{name: "KillAfter 0 trusts the eviction", killAfter: 0, steps: []want{
			{0, over, "-"}, {30 * time.Second, over, EscalateNone}, {time.Hour, over, "-"},
		}},
		{name: "back within the grant after the eviction: not killed", killAfter: 40 * time.Second, steps: []want{
			{0, over, "-"}, {30 * time.Second, over, EscalateNone}, {50 * time.Second, within, "-"}, {70 * time.Second, within, "-"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Policy{Grace: 30 * time.Second, KillAfter: tt.killAfter}
			var st State
			for i, s := range tt.steps {
				var due []Verdict
				st, due = Decide(st, Sample{Time: t0.Add(s.at), Usages: s.usages, Cards: []CardSample{{UUID: "GPU-0"}}}, p)
				got := Escalation("-")
				if len(due) > 1 {
					t.Fatalf("step %d: %d due", i, len(due))
				}
				if len(due) == 1 {
					got = due[0].Escalation
					k := key(podA, "GPU-0")
					o := st[k]
					o.Acted = true // as the Enforcer does: evict, then kill
					if got == EscalateNone {
						o.EvictedAt = t0.Add(s.at)
					} else {
						o.Killed = true
						if !due[0].EvictedAt.Equal(t0.Add(30 * time.Second)) {
							t.Errorf("step %d: EvictedAt %v", i, due[0].EvictedAt)
						}
					}
					st[k] = o
				}
				if got != s.escalation {
					t.Errorf("step %d (+%v): due %q, want %q", i, s.at, got, s.escalation)
				}
			}
		})
	}
}

func TestEvictionGrace(t *testing.T) {
	for _, tt := range []struct {
		pod   *int64
		bound time.Duration
		want  int64
	}{
		{pod: ptr.To[int64](86400), bound: 30 * time.Second, want: 30},
		{pod: ptr.To[int64](5), bound: 30 * time.Second, want: 5},
		{pod: nil, bound: 10 * time.Second, want: 10},
		{pod: nil, bound: time.Minute, want: 30}, // Kubernetes' default grace
		{pod: ptr.To[int64](60), bound: 0, want: 0},
	} {
		if got := EvictionGrace(tt.pod, tt.bound); got != tt.want {
			t.Errorf("EvictionGrace(%v, %v) = %d, want %d", ptr.Deref(tt.pod, -1), tt.bound, got, tt.want)
		}
	}
}
