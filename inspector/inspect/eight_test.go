package inspect

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/api"
)

// eightCardsScenario: three nodes of eight 80 GiB cards, as a training
// cluster has them: one busy with a card unhealthy, one isolated and two
// given whole, one cordoned, one with memory in use sampled.
func eightCardsScenario(t *testing.T) []runtime.Object {
	cards := func(node string) []api.Card {
		var cs []api.Card
		for i := range 8 {
			cs = append(cs, gpu(node, i, h100, 80))
		}
		return cs
	}
	busy := cards("gpu-node-01")
	busy[5] = withState(busy[5], api.CardUnhealthy, "XID 79")
	busy[6] = withState(busy[6], api.CardIsolated, "isolated by operator")
	sampled := cards("gpu-node-03")
	for i := range sampled {
		used := int64(1024 * 10 * i)
		sampled[i].UsedMiB = &used
	}
	objs := []runtime.Object{
		makeNode(t, "gpu-node-01", "10.1.0.1").inventory(api.UnitGiB, busy...).capacity(640, 320).obj(),
		makeNode(t, "gpu-node-02", "10.1.0.2").cordoned().inventory(api.UnitGiB, cards("gpu-node-02")...).obj(),
		makeNode(t, "gpu-node-03", "10.1.0.3").inventory(api.UnitGiB, sampled...).obj(),
		runningPod("ml", "trainer").Whole("main", 2).AssignWholeOn("gpu-node-01", api.PhaseAllocated, nil, []int{0, 1}).Obj(),
	}
	for i := 2; i < 8; i++ {
		objs = append(objs, runningPod("ml", fmt.Sprintf("serve-%d", i)).GPU("c", int64(10*i)).AssignOn("gpu-node-01", api.PhaseAllocated, i).Obj())
		objs = append(objs, runningPod("ml", fmt.Sprintf("infer-%d", i)).GPU("c", int64(8*i)).AssignOn("gpu-node-03", api.PhaseAllocated, i).Obj())
	}
	return objs
}

// TestRowsFitATerminal: the default view of 8-card nodes, marks and memory in
// use included, fits a 120-column terminal (the old layout took ~200).
func TestRowsFitATerminal(t *testing.T) {
	out, _, err := runCmd(t, eightCardsScenario(t))
	if err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(out, "\n\n") // the node rows and their legend
	for _, line := range strings.Split(table, "\n") {
		if n := len([]rune(line)); n > 120 {
			t.Errorf("line of %d columns, want at most 120:\n%s", n, line)
		}
	}
}
