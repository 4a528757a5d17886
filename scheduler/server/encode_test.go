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
	for i := 0; i < 200; i++ {
		big[fmt.Sprintf("node-%03d", i)] = "cards too full"
	}
	n1 := fixture.MakeNode("n1").Card(0, 40).Obj()
	tests := map[string]*extenderv1.ExtenderFilterResult{
		"empty":          {},
		"names and maps": {NodeNames: names("a", "b"), FailedNodes: extenderv1.FailedNodesMap{"c": `no single card has 24 GiB free for container "main"`}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}},
		"tricky strings": {NodeNames: names(tricky), FailedNodes: extenderv1.FailedNodesMap{tricky: tricky}, Error: tricky},
		"many entries":   {NodeNames: names(), FailedNodes: big, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"x": "y"}},
		"node objects":   {Nodes: &corev1.NodeList{Items: []corev1.Node{*n1}}, FailedNodes: extenderv1.FailedNodesMap{}},
		"error only":     {Error: "cache not synced"},
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
			// What encoding/json makes of the same result.
			std, _ := json.Marshal(fr)
			if err := json.Unmarshal(std, &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded (-encoding/json +ours):\n%s", diff)
			}
		})
	}
}
