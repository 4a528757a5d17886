package chaos

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testTopo = Topology{
	Nodes: []NodeSpec{
		{Name: "a", Cards: []int64{40, 40}},
		{Name: "b", Cards: []int64{80, 24}},
		{Name: "c", Cards: []int64{24, 24, 24, 24}},
	},
	Deployments: []string{"d1", "d2"},
}

func TestSameSeedGivesTheSamePlanAndAnotherSeedAnother(t *testing.T) {
	a, b := Plan(42, 500, testTopo), Plan(42, 500, testTopo)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different plans (-first +second):\n%s", diff)
	}
	if cmp.Equal(a, Plan(43, 500, testTopo)) {
		t.Error("seeds 42 and 43 gave the same plan")
	}
	// A shorter run is a prefix of a longer one: OPS=n replays the first n
	// operations of a failing run.
	if diff := cmp.Diff(a[:100], Plan(42, 100, testTopo)); diff != "" {
		t.Errorf("the first 100 operations depend on the length (-500 +100):\n%s", diff)
	}
}

// The plan deletes and touches only pods it created and has not deleted,
// names every pod once, and keeps the live pods within MaxLive.
func TestPlanTracksItsOwnPods(t *testing.T) {
	topo := testTopo
	topo.MaxLive = 30
	live := map[string]bool{}
	seen := map[string]bool{}
	for _, op := range Plan(7, 3000, topo) {
		for _, name := range op.Touch {
			if !live[name] {
				t.Fatalf("%s touches %s, not alive", op, name)
			}
		}
		for _, name := range op.Delete {
			if !live[name] {
				t.Fatalf("%s deletes %s, not alive", op, name)
			}
			delete(live, name)
		}
		before := len(live)
		for _, p := range op.Create {
			if seen[p.Name] {
				t.Fatalf("%s creates %s a second time", op, p.Name)
			}
			seen[p.Name], live[p.Name] = true, true
		}
		if len(op.Create) > 0 && before >= topo.MaxLive {
			t.Fatalf("%s creates with %d pods alive (MaxLive %d)", op, before, topo.MaxLive)
		}
	}
}

// A long plan has every kind of operation and every shape the product
// supports, including the ones that cannot fit.
func TestPlanCoversEveryKindAndShape(t *testing.T) {
	kinds := map[Kind]int{}
	var multi, withoutRequest, initPlain, initGPU, largerThanCard, largerThanNode, sameSizeBurst bool
	for _, op := range Plan(1, 2000, testTopo) {
		kinds[op.Kind]++
		if op.Kind == KindBurst && len(op.Create) >= 4 {
			sameSizeBurst = true
			for _, p := range op.Create {
				if !slices.Equal(p.Units, op.Create[0].Units) {
					t.Errorf("%s: burst of different sizes", op)
				}
			}
		}
		for _, p := range op.Create {
			multi = multi || len(p.Units) > 1
			withoutRequest = withoutRequest || slices.Contains(p.Units, 0)
			initPlain = initPlain || p.InitPlain
			initGPU = initGPU || p.InitUnits > 0
			for _, u := range p.Units {
				largerThanCard = largerThanCard || u > testTopo.LargestCard() && u <= testTopo.LargestNode()
				largerThanNode = largerThanNode || u > testTopo.LargestNode()
			}
		}
	}
	for _, w := range weights {
		if kinds[w.kind] == 0 {
			t.Errorf("no %s operation in 2000", w.kind)
		}
	}
	for what, ok := range map[string]bool{"multi-container pod": multi, "container without a request": withoutRequest,
		"plain init container": initPlain, "init container asking for gpu-mem": initGPU, "container larger than any card": largerThanCard,
		"container larger than any node": largerThanNode, "same-size burst": sameSizeBurst} {
		if !ok {
			t.Errorf("no %s in 2000 operations", what)
		}
	}
}

func TestOpStringNamesWhatItDoes(t *testing.T) {
	op := Op{Seq: 3, Kind: KindWriters, Create: []PodShape{{Name: "p00001", Units: []int64{4, 0}, InitUnits: 2}},
		Deployment: "d1", Replicas: 2, Node: "b", Isolate: []int{0}, SetIsolate: true, Touch: []string{"p00002"}}
	if got, want := op.String(), "#3 writers p00001[4 0]+init(2) d1=2 b isolate=[0] touch=p00002"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
