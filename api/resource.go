package api

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/internal/oneof"
)

// MaxUnits bounds any single quantity of units the programs accept (a card's
// capacity, a container's request). It exists so that sums over a node can
// never overflow int64; 2^40 GiB is far beyond any card.
const MaxUnits int64 = 1 << 40

// MemoryUnit is the size of one unit of Names.ResourceName.
type MemoryUnit string

const (
	// UnitGiB makes one unit 1 GiB (2^30 bytes). The default.
	UnitGiB MemoryUnit = "GiB"
	// UnitMiB makes one unit 1 MiB (2^20 bytes).
	UnitMiB MemoryUnit = "MiB"
)

// ParseMemoryUnit returns the unit named s ("GiB" or "MiB").
func ParseMemoryUnit(s string) (MemoryUnit, error) {
	return oneof.Parse("memory unit", s, UnitGiB, UnitMiB)
}

// MiB is the number of MiB in one unit.
func (u MemoryUnit) MiB() int64 {
	switch u {
	case UnitGiB:
		return 1024
	case UnitMiB:
		return 1
	}
	return 0
}

// UnitsFromMiB is how many whole units fit in mib MiB, rounding down.
//
// Worked example: an H100 80GB reports 81,559 MiB of memory; in GiB units that
// is floor(81559 / 1024) = 79 units, the remaining 663 MiB are not offered.
// In MiB units it is 81,559 units.
func (u MemoryUnit) UnitsFromMiB(mib int64) int64 {
	per := u.MiB()
	if per <= 0 || mib <= 0 {
		return 0
	}
	return mib / per
}

// ConvertUnitsUp is n units of from in units of to, rounded up, so that
// memory held is never undercounted: 1536 MiB held is 2 GiB units.
func ConvertUnitsUp(n int64, from, to MemoryUnit) int64 { return convertUnits(n, from, to, true) }

// ConvertUnitsDown is n units of from in units of to, rounded down, so
// that capacity is never overcounted: 1536 MiB offered is 1 GiB unit.
func ConvertUnitsDown(n int64, from, to MemoryUnit) int64 { return convertUnits(n, from, to, false) }

// convertUnits is ConvertUnitsUp or Down; n is returned unchanged when
// either unit is unknown (a record written before units were named).
func convertUnits(n int64, from, to MemoryUnit, up bool) int64 {
	f, t := from.MiB(), to.MiB()
	if f == 0 || t == 0 || f == t {
		return n
	}
	mib := n * f
	if up {
		mib += t - 1
	}
	return mib / t
}

// Validate reports whether u is a known unit.
func (u MemoryUnit) Validate() error {
	_, err := ParseMemoryUnit(string(u))
	return err
}

// ErrInitContainerRequest is returned (wrapped) by RequestFromPod for a pod
// whose init containers request Names.ResourceName or WholeResourceName. Such pods are not supported:
// the kubelet's device manager hands an init container's devices on to the
// app containers, which would make the card an app container gets depend on
// the kubelet rather than on the assignment. docs/protocol.md explains.
var ErrInitContainerRequest = errors.New("init containers may not request GPU memory or whole cards")

// errInitContainer is ErrInitContainerRequest said with n's resource name.
func (n Names) errInitContainer() error {
	return missingKey(ErrInitContainerRequest, "init containers may not request "+string(n.resource))
}

// errInvalid is ErrInvalidRequest said with n's resource name.
func (n Names) errInvalid() error {
	return missingKey(ErrInvalidRequest, "invalid "+string(n.resource)+" request")
}

// ErrInvalidRequest is returned (wrapped) by RequestFromPod for a request
// that is not a positive whole number of units within MaxUnits.
var ErrInvalidRequest = errors.New("invalid GPU request")

// ContainerRequest is one app container's demand for memory on one card.
type ContainerRequest struct {
	// Name is the container's name in the pod spec.
	Name string
	// Units is the memory asked for, in the node's unit; always > 0.
	Units int64
}

// PodRequest is everything a pod asks of a node: its gpu-mem demand, one
// entry per app container that requests ResourceName, in spec order (a pod
// that requests none has no entries), its whole-card demand, one entry per
// app container that requests WholeResourceName, in spec order, and its CPU
// and memory request.
type PodRequest struct {
	Containers []ContainerRequest
	// WholeCards are the containers asking for whole cards (see
	// WholeResourceName). A container is in Containers or here, never both.
	WholeCards []WholeCardRequest
	// Host is the pod's CPU and memory request (see RequestFromPod).
	Host HostResources
	// Cards is the pod's choice of cards (AnnotationCardModels,
	// AnnotationExcludeCardModels, AnnotationCardUUIDs); empty: any card.
	Cards CardChoice
	// Policy is the placement policy the pod names (AnnotationPolicy),
	// as written; empty: the extender's default. Whether the extender knows
	// and allows it is the extender's to check.
	Policy string
	// ChoiceErr is set (wrapping ErrInvalidPodAnnotation) when a
	// card-choice or policy annotation cannot be read; Cards and Policy are
	// then empty. It concerns placement only: the extender refuses to place
	// such a pod, while the demand itself (Containers) stays valid, so a
	// pod already placed keeps its cards whatever is later written in its
	// annotations.
	ChoiceErr error
}

// HostResources is CPU and memory as kube-scheduler counts requests: CPU in
// millicores, memory in MiB (2^20 bytes).
type HostResources struct {
	CPUMilli  int64
	MemoryMiB int64
}

// Total is the sum of the containers' units (shares only; whole cards are
// counted by WholeCardTotal).
func (r PodRequest) Total() int64 {
	var t int64
	for _, c := range r.Containers {
		t += c.Units
	}
	return t
}

// Empty reports whether the pod asks for no GPU at all: no memory on a card
// and no whole card.
func (r PodRequest) Empty() bool { return len(r.Containers) == 0 && len(r.WholeCards) == 0 }

// RequestFromPod reads what a pod asks of a node, the one reader of a pod's
// demand: gpu-mem per container (a whole number 1..MaxUnits, from limits or
// else requests; an explicit 0 is ErrInvalidRequest: "no GPU" is said by
// leaving the resource out), whole cards (1..MaxWholeCards), and CPU and
// memory. Init containers (sidecars too) asking for either resource give
// ErrInitContainerRequest, a container asking for both ErrMixedRequest.
//
// For a pod that asks for a GPU it also reads the card-choice and policy
// annotations (Cards, Policy; see AnnotationCardModels); a malformed one is
// reported in ChoiceErr, not as the error. A pod that asks for no GPU has
// them ignored.
//
// Host is the pod's CPU and memory request as kube-scheduler's
// NodeResourcesFit counts it: the app containers plus restartable init
// containers (sidecars), or the largest regular init container (with the
// sidecars started before it) if that is more, plus the pod overhead.
// Worked example: app containers of 500m and 1500m, an init container of
// 3 CPU: max(2000m, 3000m) = 3000m. Memory is in MiB, rounded up (a request
// of 1.5 MiB counts 2). It needs no validation, so it is set even when
// the gpu-mem demand is invalid (Containers is then empty): a pod that
// another scheduler bound still takes its node's CPU and memory.
func (n Names) RequestFromPod(pod *corev1.Pod) (PodRequest, error) {
	if pod == nil {
		return PodRequest{}, fmt.Errorf("%w: no pod", ErrInvalidRequest)
	}
	host := hostRequest(&pod.Spec)
	containers, err := n.gpuRequest(pod)
	if err != nil {
		return PodRequest{Host: host}, err
	}
	whole, err := n.wholeRequest(pod)
	if err != nil {
		return PodRequest{Host: host}, err
	}
	out := PodRequest{Containers: containers, WholeCards: whole, Host: host}
	if !out.Empty() {
		out.Cards, out.Policy, out.ChoiceErr = n.cardChoiceFromPod(pod)
	}
	return out, nil
}

// gpuRequest is PodRequest.Containers (see RequestFromPod).
func (n Names) gpuRequest(pod *corev1.Pod) ([]ContainerRequest, error) {
	var out []ContainerRequest
	err := eachAsk(pod, n.containerUnits,
		func(name string, units int64) error {
			return fmt.Errorf("%w: init container %q asks for %d", n.errInitContainer(), name, units)
		},
		func(c corev1.Container, units int64) error {
			out = append(out, ContainerRequest{Name: c.Name, Units: units})
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachAsk walks pod's containers for one GPU resource, read by ask (0: the
// container does not ask for it; an error: it asks wrongly). Init
// containers may not ask for it: the first that does is refused with the
// error refuseInit words. Each app container that asks is handed to use, in
// spec order. The first error, in spec order, ends the walk.
func eachAsk[T int | int64](pod *corev1.Pod, ask func(corev1.Container) (T, error), refuseInit func(name string, v T) error, use func(c corev1.Container, v T) error) error {
	for _, c := range pod.Spec.InitContainers {
		v, err := ask(c)
		if err != nil {
			return err
		}
		if v > 0 {
			return refuseInit(c.Name, v)
		}
	}
	for _, c := range pod.Spec.Containers {
		v, err := ask(c)
		if err != nil {
			return err
		}
		if v == 0 {
			continue
		}
		if err := use(c, v); err != nil {
			return err
		}
	}
	return nil
}

// hostRequest is PodRequest.Host (see RequestFromPod).
func hostRequest(spec *corev1.PodSpec) HostResources {
	var cpu, mem int64 // millicores, bytes
	var sideCPU, sideMem, initCPU, initMem int64
	for _, c := range spec.InitContainers {
		rc, rm := c.Resources.Requests.Cpu().MilliValue(), c.Resources.Requests.Memory().Value()
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sideCPU += rc
			sideMem += rm
			continue
		}
		initCPU = max(initCPU, sideCPU+rc)
		initMem = max(initMem, sideMem+rm)
	}
	for _, c := range spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	cpu, mem = max(cpu+sideCPU, initCPU), max(mem+sideMem, initMem)
	if spec.Overhead != nil {
		cpu += spec.Overhead.Cpu().MilliValue()
		mem += spec.Overhead.Memory().Value()
	}
	return HostResources{CPUMilli: cpu, MemoryMiB: (mem + 1<<20 - 1) >> 20}
}

func (n Names) containerUnits(c corev1.Container) (int64, error) {
	q, ok := containerQuantity(c, n.resource)
	if !ok {
		return 0, nil
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%w: container %q asks for %s, which is negative", n.errInvalid(), c.Name, q.String())
	}
	if q.IsZero() {
		return 0, fmt.Errorf("%w: container %q asks for 0; ask for at least 1, or leave %s out to ask for no GPU", n.errInvalid(), c.Name, n.resource)
	}
	if q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%w: container %q asks for %s, which is not a whole number of units", n.errInvalid(), c.Name, q.String())
	}
	v, ok := q.AsInt64()
	if !ok || v > MaxUnits {
		return 0, fmt.Errorf("%w: container %q asks for %s, more than the maximum %d units", n.errInvalid(), c.Name, q.String(), MaxUnits)
	}
	return v, nil
}
