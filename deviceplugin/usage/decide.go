package usage

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Tolerance is how far past its grant a container may go before it counts
// as over: Bytes plus Percent of the grant. "5%" of a 10 GiB grant is
// 512 MiB; "256Mi" is 256 MiB whatever the grant. A container without a
// grant on the card (Percent of 0) is allowed Bytes only.
type Tolerance struct {
	Bytes   int64
	Percent int64
}

// ParseTolerance parses --memory-tolerance: a percentage of the grant
// ("5%") or a Kubernetes quantity ("512Mi", "1Gi", "0").
func ParseTolerance(s string) (Tolerance, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 || n > 1000 {
			return Tolerance{}, fmt.Errorf("%q: want a whole percentage 0%%..1000%% of the grant (e.g. 5%%) or a quantity (e.g. 512Mi)", s)
		}
		return Tolerance{Percent: n}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return Tolerance{}, fmt.Errorf("%q: want a whole percentage of the grant (e.g. 5%%) or a non-negative quantity (e.g. 512Mi)", s)
	}
	return Tolerance{Bytes: q.Value()}, nil
}

func (t Tolerance) String() string {
	if t.Percent != 0 {
		return strconv.FormatInt(t.Percent, 10) + "%"
	}
	return resource.NewQuantity(t.Bytes, resource.BinarySI).String()
}

// Allowed is the most a container granted grantedBytes may use on the card.
func (t Tolerance) Allowed(grantedBytes int64) int64 {
	return grantedBytes + t.Bytes + grantedBytes*t.Percent/100
}

// Policy is when a container counts as over its grant long enough to act.
type Policy struct {
	Tolerance Tolerance
	// Grace is how much time over its grant a container may run up before
	// it is acted on. Time over the grant adds up; time within it pays the
	// account back at a PaybackDivisor-th of its length, so dipping under
	// the grant for a sample does not reset anything.
	Grace time.Duration
	// KillAfter is how long after its pod's eviction a container may still
	// hold memory over its grant before its processes on the card are killed
	// (Escalation EscalateOutlived): the eviction's bounded termination grace
	// plus time for the kubelet to act. 0: never (evictions are trusted).
	KillAfter time.Duration
}

// Escalation is why the Enforcer kills, in evict mode, a container that
// eviction alone did not take the memory from.
type Escalation string

const (
	// EscalateNone: the mode's own action.
	EscalateNone Escalation = ""
	// EscalateRefused: the Eviction API refused the eviction (429: a
	// PodDisruptionBudget allows no disruption now). A tenant may create such
	// a budget; it must not keep the memory.
	EscalateRefused Escalation = "eviction-refused"
	// EscalateOutlived: the pod was evicted Policy.KillAfter ago and the
	// container still holds the memory (a process that ignores SIGTERM).
	EscalateOutlived Escalation = "outlived-eviction"
)

// PaybackDivisor is how much slower time within the grant pays back time
// over it: a sample within the grant after 20 s pays back 5 s. A container
// over its grant for more than 1/(1+PaybackDivisor) of the time (20 %)
// runs up its account without end and is acted on; with the default grace
// of 30 s and a 5 s sample interval, one that goes over for 25 s, dips for
// one sample and goes over again is acted on 10 s into its second run. A
// single spike shorter than the grace period, or spikes rarer than that
// share, never is.
const PaybackDivisor = 4

// Key names one container's use of one card.
type Key struct {
	UID       types.UID
	Container string
	Card      string
}

// Over is a container's account of time over its grant.
type Over struct {
	// Since is when its current run over the grant began.
	Since time.Time
	// Debt is the time it ran over its grant, less what time within the
	// grant paid back (PaybackDivisor). Each sample counts the interval since
	// the previous one as over or within, as the sample itself is.
	Debt time.Duration
	// Last is the sample that last updated the account; IsOver whether it
	// was over the grant.
	Last   time.Time
	IsOver bool
	// Acted is set once it has been acted on in its current run over the
	// grant (a sample within the grant ends the run).
	Acted bool
	// EvictedAt is when its pod was evicted in this run over the grant (zero:
	// not evicted); Killed whether its processes were killed since.
	EvictedAt time.Time
	Killed    bool
}

// State is the containers with time over their grant not yet paid back; the
// zero State is empty.
type State map[Key]Over

// Verdict is a container over its grant for at least the grace period.
type Verdict struct {
	Usage Usage
	// AllowedBytes is what the container may use (grant plus tolerance).
	AllowedBytes int64
	// Since is when its current run over the grant began; OverFor is its
	// account (Over.Debt): at least the grace period.
	Since   time.Time
	OverFor time.Duration
	// Escalation is set when the verdict is a kill after an eviction that
	// did not take the memory (evict mode).
	Escalation Escalation
	// EvictedAt is when the pod was evicted, for EscalateOutlived.
	EvictedAt time.Time
}

// Decide is the enforcement decision, a pure function: given the accounts
// of time over the grant before (prev) and a new sample, it returns the
// accounts now and the containers due for action: over their grant in this
// sample, with at least p.Grace of time over the grant not paid back, and
// not acted on yet in their current run over it; and, once a container's
// pod was evicted (Over.EvictedAt, set by the Enforcer), the container still
// over its grant p.KillAfter later, not killed yet (EscalateOutlived).
//
// Who can be due: a container with a grant on the card, using more than the
// grant plus tolerance; and any container of a pod using a card it holds no
// grant on (measured against a grant of zero), which is the over-user that
// the neighbours' out-of-memory errors come from. Never due: processes in no
// pod (host processes: reported as unaccounted, nobody to act on); processes
// of a pod the pod cache does not know; and a process whose container the
// pod's status does not name yet, in a pod that holds a grant on that card
// (the status of a container that just started lags its first process).
// A card NVML could not list this sweep keeps its previous state, so a
// failed sweep neither starts nor resets anybody's clock.
func Decide(prev State, s Sample, p Policy) (State, []Verdict) {
	next := State{}
	failed := s.failedCards()
	for k, o := range prev {
		if failed[k.Card] {
			next[k] = o
		}
	}
	granted := map[[2]string]bool{} // (pod UID, card) with a grant
	for _, u := range s.Usages {
		if u.Grant {
			granted[[2]string{string(u.Ref.UID), u.Card}] = true
		}
	}
	var due []Verdict
	for _, u := range s.Usages {
		if !u.Ref.InPod() || u.Ref.Pod == "" {
			continue
		}
		if !u.Grant && u.Ref.Container == "" && granted[[2]string{string(u.Ref.UID), u.Card}] {
			continue
		}
		grantedBytes, usedBytes := u.Measured()
		allowed := p.Tolerance.Allowed(grantedBytes)
		k := Key{UID: u.Ref.UID, Container: u.Ref.Container, Card: u.Card}
		o, was := prev[k]
		var elapsed time.Duration
		if was && s.Time.After(o.Last) {
			elapsed = s.Time.Sub(o.Last)
		}
		if usedBytes <= allowed {
			if !was {
				continue
			}
			o.Debt -= elapsed / PaybackDivisor
			o.Last, o.IsOver, o.Acted = s.Time, false, false
			o.EvictedAt, o.Killed = time.Time{}, false
			if o.Debt > 0 {
				next[k] = o
			}
			continue
		}
		if !was || !o.IsOver {
			o.Since = s.Time // a new run over the grant
		}
		o.Debt += elapsed
		o.Last, o.IsOver = s.Time, true
		next[k] = o
		switch {
		case !o.Acted && o.Debt >= p.Grace:
			due = append(due, Verdict{Usage: u, AllowedBytes: allowed, Since: o.Since, OverFor: o.Debt})
		case o.Acted && !o.Killed && !o.EvictedAt.IsZero() && p.KillAfter > 0 && s.Time.Sub(o.EvictedAt) >= p.KillAfter:
			due = append(due, Verdict{Usage: u, AllowedBytes: allowed, Since: o.Since, OverFor: o.Debt, Escalation: EscalateOutlived, EvictedAt: o.EvictedAt})
		}
	}
	return next, due
}
