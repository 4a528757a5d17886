package server

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

func TestEncodeFilter(t *testing.T) {
	tricky := "quote \" backslash \\ newline \n tab \t nul \x00 bell \x07 <html>&amp; ünïcødé 日本 \u2028 bad \xff end"
	big := extenderv1.FailedNodesMap{}
	var many []string
	for i := 0; i < 200; i++ {
		big[fmt.Sprintf("node-%03d", i)] = "cards too full"
		many = append(many, fmt.Sprintf("other-%03d", i))
	}
	better := "a better node for this pod exists under policy binpack"
	n1 := fixture.MakeNode("n1").Card(0, 40).Obj()
	tests := map[string]filterResult{
		"empty":          {res: &extenderv1.ExtenderFilterResult{}},
		"names and maps": {res: &extenderv1.ExtenderFilterResult{NodeNames: names("a", "b"), FailedNodes: extenderv1.FailedNodesMap{"c": `no single card has 24 GiB free for container "main"`}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}},
		"tricky strings": {res: &extenderv1.ExtenderFilterResult{NodeNames: names(tricky), FailedNodes: extenderv1.FailedNodesMap{tricky: tricky}, Error: tricky}},
		"many entries":   {res: &extenderv1.ExtenderFilterResult{NodeNames: names(), FailedNodes: big, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"x": "y"}}},
		"node objects":   {res: &extenderv1.ExtenderFilterResult{Nodes: &corev1.NodeList{Items: []corev1.Node{*n1}}, FailedNodes: extenderv1.FailedNodesMap{}}},
		"error only":     {res: &extenderv1.ExtenderFilterResult{Error: "cache not synced"}},
		"a few better nodes beside failed ones": {res: &extenderv1.ExtenderFilterResult{NodeNames: names("a"), FailedNodes: extenderv1.FailedNodesMap{"c": "full"}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}},
			better: []string{"b", "d"}, betterMsg: better},
		"many better nodes beside many failed ones": {res: &extenderv1.ExtenderFilterResult{NodeNames: names("a"), FailedNodes: big, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}},
			better: many, betterMsg: better},
		"only better nodes": {res: &extenderv1.ExtenderFilterResult{NodeNames: names("a"), FailedNodes: extenderv1.FailedNodesMap{}},
			better: many, betterMsg: better},
	}
	for name, fr := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := encodeFilter(fr)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(b) {
				t.Fatalf("invalid JSON: %s", b)
			}
			var got, want extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			// What encoding/json makes of the result Filter returns (the
			// better nodes merged into FailedNodes), decoded the same way.
			merged := *fr.res
			if len(fr.better) > 0 {
				merged.FailedNodes = extenderv1.FailedNodesMap{}
				for k, v := range fr.res.FailedNodes {
					merged.FailedNodes[k] = v
				}
				for _, k := range fr.better {
					merged.FailedNodes[k] = fr.betterMsg
				}
			}
			std, _ := json.Marshal(&merged)
			if err := json.Unmarshal(std, &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded (-encoding/json +ours):\n%s", diff)
			}
		})
	}
}
