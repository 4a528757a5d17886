package server

import (
	"context"
	"fmt"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/registry"
)

// BenchmarkFilterCardChoice is BenchmarkFilterPolicies' filter at 5,000
// nodes for pods that choose: no annotation (the reference; and a pod too
// large for any card, the reference for pods that fit nowhere), every
// card's model allowed by words (each card passes the model check), every
// card's model excluded-or-not, a model no node has (every node fails with
// a reason), one card by UUID (4,999 nodes fail), and the spread policy
// named by the pod.
func BenchmarkFilterCardChoice(b *testing.B) {
	const n = 5000
	cases := []struct {
		name  string
		ann   map[string]string
		units int64
	}{
		{"none", nil, 10},
		// The reference for pods that fit nowhere: larger than any card.
		{"none-too-big", nil, benchCardUnits + 1},
		{"card-models=A100", map[string]string{api.DefaultNames().AnnotationCardModels(): "A100"}, 10},
		{"exclude-card-models=H100", map[string]string{api.DefaultNames().AnnotationExcludeCardModels(): "H100"}, 10},
		{"card-models=nowhere", map[string]string{api.DefaultNames().AnnotationCardModels(): "B200"}, 10},
		{"card-uuids=one", map[string]string{api.DefaultNames().AnnotationCardUUIDs(): podtest.CardUUID("node-00042", 3)}, 10},
		{"policy=spread", map[string]string{api.DefaultNames().AnnotationPolicy(): "spread"}, 10},
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("%s/nodes=%d", tc.name, n), func(b *testing.B) {
			e, names := benchEnvPolicy(b, n, "binpack")
			spread, err := registry.Lookup("spread")
			if err != nil {
				b.Fatal(err)
			}
			e.srv.allowed = newAllowedPolicies(e.srv.policy, []*allocator.Policy{spread})
			pw := podtest.Make("ns", "p").GPU("main", tc.units)
			for k, v := range tc.ann {
				pw.Annotation(k, v)
			}
			args := &extenderv1.ExtenderArgs{Pod: pw.Obj(), NodeNames: &names}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			defer func() { reportCPU(b, cpu0) }()
			for i := 0; i < b.N; i++ {
				if _, err := e.srv.Filter(ctx, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
