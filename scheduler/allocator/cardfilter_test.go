package allocator_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

const (
	mH100 = "NVIDIA H100 80GB HBM3"
	mA40  = "NVIDIA A100-SXM4-40GB"
	mA80  = "NVIDIA A100-SXM4-80GB"
	mL4   = "NVIDIA L4"
)

// choice reads a card choice from annotations through the contract's one
// pod reader, as the extender does.
func choice(t *testing.T, ann map[string]string) api.CardChoice {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{api.DefaultNames().ResourceName(): resource.MustParse("1")}}}}}}
	req, err := api.DefaultNames().RequestFromPod(pod)
	if err != nil || req.ChoiceErr != nil {
		t.Fatalf("annotations %v: %v %v", ann, err, req.ChoiceErr)
	}
	return req.Cards
}

// mixed is a node of an H100, an A100 40GB, an A100 80GB and an L4
// (indexes 0-3, UUIDs GPU-a..GPU-d), all with 16 units free.
func mixed() *allocator.Node {
	return node(
		withModel(card(0, 80, 64), mH100),
		withModel(card(1, 40, 24), mA40),
		withModel(card(2, 80, 64), mA80),
		withModel(card(3, 24, 8), mL4),
	)
}

func TestCardChoicePlacesOnlyOnChosenCards(t *testing.T) {
	tests := []struct {
		name     string
		policy   string
		ann      map[string]string
		node     *allocator.Node
		units    int64
		wantCard int    // when it fits
		wantCode string // when it does not
		wantMsg  string // a part of the reason
	}{
		{name: "no choice: binpack's best fit among all cards (the lowest index on a tie)", node: mixed(), units: 10, wantCard: 0},
		{name: "allowed models by words: A100-80GB is only card 2", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "A100-80GB"}, node: mixed(), units: 10, wantCard: 2},
		{name: "allowed models: the first of several that fits best", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "L4|A100-40GB"}, node: mixed(), units: 10, wantCard: 1},
		{name: "excluded models: H100 and A100 out leaves the L4", ann: map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "H100,A100"}, node: mixed(), units: 10, wantCard: 3},
		{name: "a card by UUID", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): "GPU-c"}, node: mixed(), units: 10, wantCard: 2},
		{name: "one of two UUIDs, best fit between them", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): "GPU-d,GPU-b"}, node: mixed(), units: 10, wantCard: 1},
		{name: "spread obeys the choice too", policy: "spread", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "A100"}, node: node(withModel(card(0, 80, 0), mH100), withModel(card(1, 40, 30), mA40), withModel(card(2, 80, 10), mA80)), units: 5, wantCard: 2},
		{name: "frag obeys the choice too", policy: "frag", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "L4"}, node: mixed(), units: 4, wantCard: 3},
		{name: "fgd obeys the choice too", policy: "fgd", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "A100-40GB"}, node: mixed(), units: 4, wantCard: 1},
		{
			name: "a model not on the node: the reason names what the node has", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "B200|GH200"}, node: mixed(), units: 1,
			wantCode: "NoMatchingCard",
			wantMsg:  `no card of model "B200|GH200" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA A100-SXM4-40GB, NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3, NVIDIA L4`,
		},
		{
			name: "a UUID not on the node", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): "GPU-zz"}, node: mixed(), units: 1,
			wantCode: "NoMatchingCard", wantMsg: `card GPU-zz is not on this node (annotation gpushare.example.com/card-uuids)`,
		},
		{
			name: "several UUIDs none on the node", ann: map[string]string{api.DefaultNames().AnnotationCardUUIDs(): "GPU-y,GPU-z"}, node: mixed(), units: 1,
			wantCode: "NoMatchingCard", wantMsg: `none of the cards GPU-y, GPU-z is on this node`,
		},
		{
			name: "every card excluded", ann: map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "NVIDIA"}, node: mixed(), units: 1,
			wantCode: "NoMatchingCard", wantMsg: `every card the pod could take on this node is of an excluded model (exclude-card-models "NVIDIA"); models here:`,
		},
		{
			name: "model and UUID each on the node but never the same card", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "L4", api.DefaultNames().AnnotationCardUUIDs(): "GPU-a"}, node: mixed(), units: 1,
			wantCode: "NoMatchingCard", wantMsg: `no card on this node is both of the chosen models and one of the chosen cards (card-models "L4", card-uuids "GPU-a"); cards here: GPU-a (NVIDIA H100 80GB HBM3)`,
		},
		{
			name: "all chosen cards full: resolvable, and it says only the chosen cards were looked at", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}, node: mixed(), units: 20,
			wantCode: "InsufficientFree", wantMsg: `no single card of those the pod chose (card-models "H100") has 20 GiB free for container "a"; largest free is 16 GiB on card 0`,
		},
		{
			name: "larger than any chosen card", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "L4"}, node: mixed(), units: 30,
			wantCode: "LargerThanAnyCard", wantMsg: `container "a" asks for 30 GiB, more than any card of those the pod chose (card-models "L4") holds (largest is 24 GiB)`,
		},
		{
			name: "the chosen cards unhealthy: the census says so", ann: map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"},
			node: node(withState(withModel(card(0, 80, 0), mH100), api.CardUnhealthy), withModel(card(1, 24, 0), mL4)), units: 1,
			wantCode: "NoSchedulableCard", wantMsg: `no schedulable GPU for container "a" (2 cards: 1 unhealthy, 1 not chosen by the pod (card-models "H100"))`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = "binpack"
			}
			p, err := registry.Lookup(policy)
			if err != nil {
				t.Fatal(err)
			}
			req := shares(tc.units)
			req.Cards = allocator.NewCardFilter(choice(t, tc.ann), nil)
			w := &allocator.Workload{Shapes: []allocator.Shape{{Units: 4, Weight: 1}, {Units: 10, Weight: 1}}}
			w.Reindex()
			// With and without the known-model verdicts, Decide and Evaluate
			// agree.
			known := allocator.NewCardFilter(choice(t, tc.ann), []string{mH100, mA40, mA80, mL4})
			reqKnown := req
			reqKnown.Cards = known
			d := p.Decide(tc.node, req, w)
			for _, other := range []allocator.Decision{p.Decide(tc.node, reqKnown, w), p.Evaluate(tc.node, req, w)} {
				if other.Fits != d.Fits || other.Message() != d.Message() {
					t.Errorf("decisions differ: %+v vs %+v", d, other)
				}
			}
			if tc.wantCode == "" {
				if !d.Fits {
					t.Fatalf("does not fit: %s", d.Message())
				}
				if got := d.Placements[0].Grants[0].Card; got != tc.wantCard {
					t.Errorf("card %d, want %d", got, tc.wantCard)
				}
				return
			}
			if d.Fits {
				t.Fatalf("fits on card %d, want %s", d.Placements[0].Grants[0].Card, tc.wantCode)
			}
			if string(d.Reasons[0].Code) != tc.wantCode || !strings.Contains(d.Message(), tc.wantMsg) {
				t.Errorf("reason %s %q, want %s containing %q", d.Reasons[0].Code, d.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

func TestCardChoiceWholeCards(t *testing.T) {
	p, _ := registry.Lookup("binpack")
	n := node(withModel(card(0, 80, 0), mH100), withModel(card(1, 40, 0), mA40), withModel(card(2, 80, 0), mH100))
	req := allocator.Request{Demands: []allocator.Demand{{Container: "a", WholeCards: 2}},
		Cards: allocator.NewCardFilter(choice(t, map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}), nil)}
	d := p.Decide(n, req, nil)
	if !d.Fits {
		t.Fatalf("two H100 whole: %s", d.Message())
	}
	var got []int
	for _, g := range d.Placements[0].Grants {
		got = append(got, g.Card)
	}
	if diff := cmp.Diff([]int{0, 2}, got, cmpopts.SortSlices(func(a, b int) bool { return a < b })); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	req.Cards = allocator.NewCardFilter(choice(t, map[string]string{api.DefaultNames().AnnotationCardModels(): "B200"}), nil)
	if d := p.Decide(n, req, nil); d.Fits || d.Reasons[0].Code != allocator.ReasonNoMatchingCard {
		t.Errorf("whole cards of a model not on the node: %+v, want NoMatchingCard", d)
	}
}

func TestCardFilter(t *testing.T) {
	if f := allocator.NewCardFilter(api.CardChoice{}, []string{mH100}); f != nil {
		t.Errorf("an empty choice gives a filter %+v, want nil (the hot path skips it)", f)
	}
	var nilFilter *allocator.CardFilter
	c := withModel(card(0, 80, 0), mL4)
	if !nilFilter.Allows(&c) {
		t.Error("the nil filter refuses a card")
	}
	// A verdict worked out ahead and one matched on the spot agree, also
	// for a model that was not known when the filter was made.
	ch := choice(t, map[string]string{api.DefaultNames().AnnotationCardModels(): "A100", api.DefaultNames().AnnotationExcludeCardModels(): "40GB"})
	ahead := allocator.NewCardFilter(ch, []string{mA40, mA80, mH100, mA80})
	onTheSpot := allocator.NewCardFilter(ch, nil)
	for _, m := range []string{mA40, mA80, mH100, mL4, "NVIDIA A100 80GB PCIe"} {
		c := withModel(card(0, 80, 0), m)
		if ahead.Allows(&c) != onTheSpot.Allows(&c) || ahead.Allows(&c) != ch.Allows(m, c.UUID) {
			t.Errorf("model %q: ahead %v, on the spot %v, contract %v", m, ahead.Allows(&c), onTheSpot.Allows(&c), ch.Allows(m, c.UUID))
		}
	}
}

// On a node of one model the reason is written when the filter is made,
// for the known models; it is the one written per node otherwise.
func TestCardChoiceReasonOnANodeOfOneModel(t *testing.T) {
	p, _ := registry.Lookup("binpack")
	n := node(withModel(card(0, 24, 0), mL4), withModel(card(1, 24, 0), mL4))
	for _, tc := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{api.DefaultNames().AnnotationCardModels(): "H100"}, `no card of model "H100" on this node (annotation gpushare.example.com/card-models); models here: NVIDIA L4`},
		{map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "L4"}, `every card the pod could take on this node is of an excluded model (exclude-card-models "L4"); models here: NVIDIA L4`},
		{map[string]string{api.DefaultNames().AnnotationCardModels(): "H100", api.DefaultNames().AnnotationCardUUIDs(): "GPU-x"}, `card GPU-x is not on this node (annotation gpushare.example.com/card-uuids)`},
	} {
		for _, known := range [][]string{nil, {mH100, mL4}} {
			req := shares(4)
			req.Cards = allocator.NewCardFilter(choice(t, tc.ann), known)
			d := p.Evaluate(n, req, nil)
			if d.Fits || d.Reasons[0].Code != allocator.ReasonNoMatchingCard || d.Message() != tc.want {
				t.Errorf("%v, known models %v: %+v, want NoMatchingCard %q", tc.ann, known, d, tc.want)
			}
		}
	}
}
