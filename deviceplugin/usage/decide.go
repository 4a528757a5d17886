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
	// Grace is how long a container must stay over before it is acted on:
	// a sample over by more than the tolerance starts the clock, a sample
	// within it stops it.
	Grace time.Duration
}

// Key names one container's use of one card.
type Key struct {
	UID       types.UID
	Container string
	Card      string
}

// Over is a container over its grant: since when, and whether it has been
// acted on in this episode (an episode ends with a sample within the
// grant).
type Over struct {
	Since time.Time
	Acted bool
}

// State is the containers over their grant; the zero State is empty.
type State map[Key]Over

// Verdict is a container over its grant for at least the grace period.
type Verdict struct {
	Usage Usage
	// AllowedBytes is what the container may use (grant plus tolerance).
	AllowedBytes int64
	Since        time.Time
}

// Decide is the enforcement decision, a pure function: given what was over
// before (prev) and a new sample, it returns what is over now and the
// containers due for action, those over for at least p.Grace and not
// acted on yet in this episode.
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
	failed := map[string]bool{}
	for _, c := range s.Cards {
		if c.Err != nil {
			failed[c.UUID] = true
		}
	}
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
		allowed := p.Tolerance.Allowed(u.GrantedBytes)
		if u.UsedBytes <= allowed {
			continue
		}
		k := Key{UID: u.Ref.UID, Container: u.Ref.Container, Card: u.Card}
		o, was := prev[k]
		if !was {
			o = Over{Since: s.Time}
		}
		next[k] = o
		if !o.Acted && s.Time.Sub(o.Since) >= p.Grace {
			due = append(due, Verdict{Usage: u, AllowedBytes: allowed, Since: o.Since})
		}
	}
	return next, due
}
