package server

import (
	"context"
	"fmt"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// BenchmarkFilterCardChoice is BenchmarkFilterPolicies' filter at 5,000
// nodes for pods that choose: no annotation (the reference), every card's
// model allowed by words (the most matching work: each card passes the
// model check), a model no node has (every node fails, reasons written),
// one card by UUID, and the spread policy named by the pod.
func BenchmarkFilterCardChoice(b *testing.B) {
	const n = 5000
	cases := []struct {
		name string
		ann  map[string]string
	}{
		{"none", nil},
		{"card-models=A100", map[string]string{api.AnnotationCardModels: "A100"}},
		{"exclude-card-models=H100", map[string]string{api.AnnotationExcludeCardModels: "H100"}},
		{"card-models=nowhere", map[string]string{api.AnnotationCardModels: "B200"}},
		{"card-uuids=one", map[string]string{api.AnnotationCardUUIDs: fixture.CardUUID("node-00042", 3)}},
		{"policy=spread", map[string]string{api.AnnotationPolicy: "spread"}},
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("%s/nodes=%d", tc.name, n), func(b *testing.B) {
			e, names := benchEnvPolicy(b, n, "binpack")
			spread, err := allocator.Lookup("spread")
			if err != nil {
				b.Fatal(err)
			}
			e.srv.allowed = newAllowedPolicies(e.srv.policy, []*allocator.Policy{spread})
			pw := fixture.MakePod("ns", "p").GPU("main", 10)
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
				if _, err := e.srv.filter(ctx, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
