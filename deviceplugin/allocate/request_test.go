package allocate

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// A pod's demand is read by the contract's one reader (api.Names.RequestFromPod).
// A pod that breaks the contract (here a copied assignment, and an init
// container asking for gpu-mem) is still in the queue the way the kubelet
// will ask, so its Allocate finds it, and is refused with the contract's
// reason rather than taken for a valid pod.
func TestContractBreakingPodsAreRefusedWithTheContractsReason(t *testing.T) {
	withInit := podtest.Bound(node, "init-gpu", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).InitGPU("setup", 2).Obj()
	next := podtest.Bound(node, "valid", 2).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()
	s := Build([]*corev1.Pod{withInit, next}, State{})
	d, err := Match(s, ids(card0, 0, 2))
	if !errors.Is(err, ErrPodRequest) || !errors.Is(err, api.ErrInitContainerRequest) {
		t.Fatalf("err = %v, want ErrPodRequest wrapping api.ErrInitContainerRequest", err)
	}
	if d.Entry.Pod != "init-gpu" || d.Entry.Container != "setup" {
		t.Errorf("refused %s/%s, want init-gpu/setup (the kubelet allocates init containers first)", d.Entry.Pod, d.Entry.Container)
	}
	if !strings.Contains(err.Error(), `pod ns/init-gpu: `) || !strings.Contains(err.Error(), `init container "setup"`) {
		t.Errorf("message %q does not name the pod and the init container", err)
	}
}

// A container asking for an explicit 0 makes the pod invalid (the contract),
// but the kubelet asks nothing for it: it adds no queue entry.
func TestZeroRequestAddsNoEntry(t *testing.T) {
	p := podtest.Bound(node, "zero", 0).GPU("c", 2).GPU("z", 0).Obj()
	q := Queue([]*corev1.Pod{p}, State{})
	if len(q) != 1 || q[0].Container != "c" || !errors.Is(q[0].AssignErr, ErrPodRequest) {
		t.Errorf("queue = %+v, want only c, refused with ErrPodRequest", q)
	}
}

// The kubelet hands a container units of several cards only when no card
// of the node has its units free: the refusal, which the kubelet puts in
// the pod's UnexpectedAdmissionError, says so and what to do.
func TestUnitsOfSeveralCardsAreRefusedSayingWhatToDo(t *testing.T) {
	pods := []*corev1.Pod{podtest.Bound(node, "p", 1).GPU("c", 2).Assign(api.PhaseAssigned, c0).Obj()}
	_, err := Match(Build(pods, State{}), append(ids(card0, 0, 1), ids(card1, 0, 1)...))
	if !errors.Is(err, ErrSpansCards) || !strings.Contains(err.Error(), "no card of the node has") || !strings.Contains(err.Error(), "recreate the pod") {
		t.Errorf("Match of units of two cards = %v; want ErrSpansCards saying that no card had the units free, and to recreate the pod", err)
	}
}
