package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Mode is --memory-enforcement: what happens to a container over its grant
// for longer than the grace period.
type Mode string

const (
	// ModeOff samples (metrics, inventory) and acts on nothing.
	ModeOff Mode = "off"
	// ModeReport records a Warning Event on the pod and changes nothing
	// that runs: the over-user keeps the memory its neighbours were granted.
	ModeReport Mode = "report"
	// ModeEvict evicts the pod through the Eviction API (policy/v1) with a
	// bounded termination grace; when the eviction is refused (a
	// PodDisruptionBudget) or the container still holds the memory after the
	// grace, its processes on the card are killed. The default (DefaultMode):
	// a neighbour on the same card keeps its grant.
	ModeEvict Mode = "evict"
	// ModeKill sends SIGKILL to the container's processes on the card.
	ModeKill Mode = "kill"
)

// DefaultMode is --memory-enforcement's default and the chart's.
const DefaultMode = ModeEvict

// ParseMode parses --memory-enforcement.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOff, ModeReport, ModeEvict, ModeKill:
		return m, nil
	}
	return "", fmt.Errorf("unknown memory enforcement %q: use off, report, evict or kill", s)
}

// ErrRetryLater is returned (wrapped) by Actions.Evict when the API server
// refused the eviction for now (429: a PodDisruptionBudget allows no
// disruption): the Enforcer kills the container's processes on the card
// instead.
var ErrRetryLater = errors.New("eviction refused for now")

// Actions are the Enforcer's effects, behind an interface (KubeActions and
// ProcessKiller in production, fakes in tests).
type Actions interface {
	// Report records that v is over its grant, saying what was done about
	// it (action: "report", "evict" or "kill").
	Report(ctx context.Context, v Verdict, action string) error
	// Evict evicts v's pod.
	Evict(ctx context.Context, v Verdict) error
	// Kill sends SIGKILL to v's processes on the card.
	Kill(ctx context.Context, v Verdict) error
}

// Outcome is counted per action and result in the metrics.
type Outcome struct {
	Action string // report, evict, kill
	Result string // done, refused (an eviction refused, then a kill), error
}

// Enforcer applies Decide to each sample and acts per its Mode.
type Enforcer struct {
	Mode    Mode
	Policy  Policy
	Actions Actions
	Log     klog.Logger
	// Count is told every action's outcome (nil: not counted).
	Count func(Outcome)

	state State
}

// Observe takes one sample: decides who is due and acts on them. It
// returns the verdicts it acted on (all due ones in report mode).
//
// In evict mode the memory is taken back whatever the pod sets: an eviction
// the API server refuses (a PodDisruptionBudget allowing no disruption) is
// followed at once by a kill of the container's processes on the card, and
// a container still over its grant Policy.KillAfter after its pod's eviction
// (a process that ignores SIGTERM) is killed then (Decide's
// EscalateOutlived).
func (e *Enforcer) Observe(ctx context.Context, s Sample) []Verdict {
	if e.Mode == ModeOff {
		return nil
	}
	next, due := Decide(e.state, s, e.Policy)
	e.state = next
	evicted := map[types.UID]bool{} // one eviction per pod per sweep
	var acted []Verdict
	for _, v := range due {
		k := Key{UID: v.Usage.Ref.UID, Container: v.Usage.Ref.Container, Card: v.Usage.Card}
		log := e.Log.WithValues("pod", klog.KRef(v.Usage.Ref.Namespace, v.Usage.Ref.Pod), "container", v.Usage.Ref.Container,
			"card", v.Usage.Card, "usedBytes", v.Usage.UsedBytes, "allowedBytes", v.AllowedBytes, "grantedBytes", v.Usage.GrantedBytes, "overFor", v.OverFor.Round(time.Second))
		var err error
		action := string(e.Mode)
		o := e.state[k]
		switch {
		case e.Mode == ModeReport:
			err = e.Actions.Report(ctx, v, action)
		case e.Mode == ModeEvict && v.Escalation == EscalateNone:
			if evicted[v.Usage.Ref.UID] {
				// Another container of the pod was evicted with it this sweep.
				o.Acted, o.EvictedAt = true, s.Time
				e.state[k] = o
				continue
			}
			err = e.Actions.Evict(ctx, v)
			switch {
			case err == nil:
				evicted[v.Usage.Ref.UID] = true
				o.EvictedAt = s.Time
				e.report(ctx, log, v, action)
			case errors.Is(err, ErrRetryLater):
				// A disruption budget does not exempt a pod from its grant.
				log.Info("GPU memory over grant: eviction refused (disruption budget); killing the container's processes on the card", "err", err)
				e.count(action, "refused")
				v.Escalation, action = EscalateRefused, string(ModeKill)
				if err = e.Actions.Kill(ctx, v); err == nil {
					o.Killed = true
					e.report(ctx, log, v, action)
				}
			}
		default: // kill mode, or a kill after an eviction (EscalateOutlived)
			action = string(ModeKill)
			if err = e.Actions.Kill(ctx, v); err == nil {
				o.Killed = true
				e.report(ctx, log, v, action)
			}
		}
		if err != nil {
			log.Error(err, "GPU memory over grant: action failed, retrying at the next sweep", "action", action)
			e.count(action, "error")
			continue
		}
		log.Info("GPU memory over grant: acted", "action", action, "escalation", v.Escalation, "pids", v.Usage.PIDs)
		e.count(action, "done")
		o.Acted = true
		e.state[k] = o
		acted = append(acted, v)
	}
	return acted
}

// report records the Event that says what was done; its failure is logged,
// the action stands.
func (e *Enforcer) report(ctx context.Context, log klog.Logger, v Verdict, action string) {
	if err := e.Actions.Report(ctx, v, action); err != nil {
		log.Error(err, "Recording the event failed", "action", action)
	}
}

func (e *Enforcer) count(action, result string) {
	if e.Count != nil {
		e.Count(Outcome{Action: action, Result: result})
	}
}
