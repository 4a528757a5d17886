package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NVML product names as real cards report them, and the playground's.
var (
	a100_40  = "NVIDIA A100-SXM4-40GB"
	a100_80  = "NVIDIA A100-SXM4-80GB"
	a100pcie = "NVIDIA A100 80GB PCIe"
	h100     = "NVIDIA H100 80GB HBM3"
	h100nvl  = "NVIDIA H100 NVL"
	a10      = "NVIDIA A10"
	l4       = "NVIDIA L4"
	l40s     = "NVIDIA L40S"
	v100     = "Tesla V100-SXM2-16GB"
	simH100  = "NVIDIA H100"
)

func TestModelPatternMatchesWholeWordsOfTheProductName(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{pattern: "H100", match: []string{h100, h100nvl, simH100}, noMatch: []string{a100_40, l4}},
		{pattern: "H100-80GB", match: []string{h100}, noMatch: []string{h100nvl, simH100, a100_80}},
		{pattern: "A100-80GB", match: []string{a100_80, a100pcie}, noMatch: []string{a100_40, h100}},
		{pattern: "a100 40gb", match: []string{a100_40}, noMatch: []string{a100_80}},
		{pattern: "A10", match: []string{a10}, noMatch: []string{a100_40, a100_80}},
		{pattern: "L4", match: []string{l4}, noMatch: []string{l40s}},
		{pattern: "V100", match: []string{v100}, noMatch: []string{a100_40}},
		{pattern: "NVIDIA A100-SXM4-40GB", match: []string{a100_40}, noMatch: []string{a100_80, a100pcie}},
		{pattern: "80GB H100", match: []string{h100}, noMatch: []string{a100_80}},
		{pattern: "Simulated GPU", match: []string{"Simulated GPU"}, noMatch: []string{h100}},
	}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			p, err := ParseModelPattern(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.match {
				if !p.Matches(m) {
					t.Errorf("%q does not match %q, want it to", tc.pattern, m)
				}
			}
			for _, m := range tc.noMatch {
				if p.Matches(m) {
					t.Errorf("%q matches %q, want it not to", tc.pattern, m)
				}
			}
		})
	}
	if _, err := ParseModelPattern(" -- "); err == nil || !strings.Contains(err.Error(), "no letters or digits") {
		t.Errorf("a pattern of separators only: err = %v, want 'no letters or digits'", err)
	}
	if (ModelPattern{}).Matches(h100) {
		t.Error("the zero ModelPattern matches a model")
	}
}

func TestCardChoiceAllows(t *testing.T) {
	pats := func(s ...string) []ModelPattern {
		var out []ModelPattern
		for _, x := range s {
			p, err := ParseModelPattern(x)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	tests := []struct {
		name   string
		choice CardChoice
		model  string
		uuid   string
		want   bool
	}{
		{name: "the empty choice allows every card", model: l4, uuid: "GPU-1", want: true},
		{name: "one of the allowed models", choice: CardChoice{Models: pats("H100", "A100-80GB")}, model: a100_80, want: true},
		{name: "none of the allowed models", choice: CardChoice{Models: pats("H100", "A100-80GB")}, model: a100_40},
		{name: "an excluded model", choice: CardChoice{ExcludeModels: pats("L4")}, model: l4},
		{name: "exclusion is by whole words: L4 does not exclude L40S", choice: CardChoice{ExcludeModels: pats("L4")}, model: l40s, want: true},
		{name: "exclusion wins over an allowed model", choice: CardChoice{Models: pats("A100"), ExcludeModels: pats("40GB")}, model: a100_40},
		{name: "allowed and not excluded", choice: CardChoice{Models: pats("A100"), ExcludeModels: pats("40GB")}, model: a100_80, want: true},
		{name: "a listed UUID", choice: CardChoice{UUIDs: []string{"GPU-1", "GPU-2"}}, model: l4, uuid: "GPU-2", want: true},
		{name: "an unlisted UUID", choice: CardChoice{UUIDs: []string{"GPU-1"}}, model: l4, uuid: "GPU-3"},
		{name: "UUIDs are exact: no prefix, no case folding", choice: CardChoice{UUIDs: []string{"gpu-1"}}, model: l4, uuid: "GPU-1"},
		{name: "a listed UUID of an excluded model is not allowed", choice: CardChoice{UUIDs: []string{"GPU-1"}, ExcludeModels: pats("L4")}, model: l4, uuid: "GPU-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.choice.Allows(tc.model, tc.uuid); got != tc.want {
				t.Errorf("Allows(%q, %q) = %v, want %v", tc.model, tc.uuid, got, tc.want)
			}
		})
	}
}

func TestRequestFromPodReadsTheCardChoice(t *testing.T) {
	gpuPod := func(ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("c", "4", "")}}}
	}
	type view struct {
		Models, Exclude, UUIDs []string
		Policy                 string
	}
	texts := func(ps []ModelPattern) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Text)
		}
		return out
	}
	tests := []struct {
		name    string
		ann     map[string]string
		want    view
		errText string
	}{
		{name: "no annotations: any card, the default policy"},
		{
			name: "models separated by | or , with spaces trimmed",
			ann:  map[string]string{DefaultNames().AnnotationCardModels(): "H100-80GB| A100-80GB ,L4"},
			want: view{Models: []string{"H100-80GB", "A100-80GB", "L4"}},
		},
		{
			name: "excluded models, UUIDs and a policy",
			ann:  map[string]string{DefaultNames().AnnotationExcludeCardModels(): "T4", DefaultNames().AnnotationCardUUIDs(): "GPU-a,GPU-b", DefaultNames().AnnotationPolicy(): " spread "},
			want: view{Exclude: []string{"T4"}, UUIDs: []string{"GPU-a", "GPU-b"}, Policy: "spread"},
		},
		{name: "an empty model list", ann: map[string]string{DefaultNames().AnnotationCardModels(): " "}, errText: `gpushare.example.com/card-models is empty: list at least one entry (e.g. "H100|A100-80GB") or remove the annotation`},
		{name: "an empty entry", ann: map[string]string{DefaultNames().AnnotationCardModels(): "H100||A100"}, errText: `card-models "H100||A100" has an empty entry`},
		{name: "a trailing separator", ann: map[string]string{DefaultNames().AnnotationExcludeCardModels(): "L4,"}, errText: `exclude-card-models "L4," has an empty entry`},
		{name: "an entry without letters or digits", ann: map[string]string{DefaultNames().AnnotationCardModels(): "H100|--"}, errText: `"--" has no letters or digits`},
		{name: "an empty UUID list", ann: map[string]string{DefaultNames().AnnotationCardUUIDs(): ""}, errText: "card-uuids is empty"},
		{name: "UUIDs separated by spaces", ann: map[string]string{DefaultNames().AnnotationCardUUIDs(): "GPU-a GPU-b"}, errText: `"GPU-a GPU-b" is not a card UUID (it contains a space)`},
		{name: "an empty policy", ann: map[string]string{DefaultNames().AnnotationPolicy(): ""}, errText: `policy is empty: name a policy (e.g. "spread")`},
		{name: "64 UUIDs are accepted", ann: map[string]string{DefaultNames().AnnotationCardUUIDs(): uuidList(64)}, want: view{UUIDs: strings.Split(uuidList(64), ",")}},
		{name: "a 65th UUID is refused", ann: map[string]string{DefaultNames().AnnotationCardUUIDs(): uuidList(65)}, errText: "card-uuids lists 65 entries, over the limit of 64: name fewer cards"},
		{name: "a 228 kB UUID list is refused by size, not echoed", ann: map[string]string{DefaultNames().AnnotationCardUUIDs(): strings.Repeat("GPU-"+strings.Repeat("f", 36)+",", 5700)}, errText: "card-uuids is 233700 bytes, over the limit of 4096"},
		{name: "an oversized model list is refused", ann: map[string]string{DefaultNames().AnnotationExcludeCardModels(): strings.Repeat("H", 5000)}, errText: "exclude-card-models is 5000 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DefaultNames().RequestFromPod(gpuPod(tc.ann))
			if err != nil {
				t.Fatalf("a malformed annotation is not the request's error (the demand stays valid): %v", err)
			}
			if len(got.Containers) != 1 {
				t.Fatalf("containers %+v, want the one demand whatever the annotations", got.Containers)
			}
			if tc.errText != "" {
				if !errors.Is(got.ChoiceErr, ErrInvalidPodAnnotation) || !strings.Contains(got.ChoiceErr.Error(), tc.errText) {
					t.Fatalf("ChoiceErr = %.300v, want ErrInvalidPodAnnotation containing %q", got.ChoiceErr, tc.errText)
				}
				if n := len(got.ChoiceErr.Error()); n > MaxCardChoiceBytes+512 {
					t.Errorf("the error is %d bytes: it lands in every node's filter reason, keep it short", n)
				}
				if !got.Cards.Empty() || got.Policy != "" {
					t.Errorf("with ChoiceErr the choice is %+v / %q, want empty", got.Cards, got.Policy)
				}
				return
			}
			if got.ChoiceErr != nil {
				t.Fatalf("ChoiceErr = %v", got.ChoiceErr)
			}
			v := view{Models: texts(got.Cards.Models), Exclude: texts(got.Cards.ExcludeModels), UUIDs: got.Cards.UUIDs, Policy: got.Policy}
			if diff := cmp.Diff(tc.want, v); diff != "" {
				t.Errorf("choice (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a pod asking for no GPU has its annotations ignored", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{DefaultNames().AnnotationCardModels(): "", DefaultNames().AnnotationPolicy(): "x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}}}
		got, err := DefaultNames().RequestFromPod(pod)
		if err != nil || got.ChoiceErr != nil || !got.Cards.Empty() || got.Policy != "" {
			t.Errorf("got %+v, %v; want an empty request", got, err)
		}
	})
}

func TestCardChoiceString(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		DefaultNames().AnnotationCardModels(): "H100 | A100-80GB", DefaultNames().AnnotationExcludeCardModels(): "L4", DefaultNames().AnnotationCardUUIDs(): "GPU-1,GPU-2",
	}}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("c", "4", "")}}}
	req, err := DefaultNames().RequestFromPod(pod)
	if err != nil || req.ChoiceErr != nil {
		t.Fatal(err, req.ChoiceErr)
	}
	want := `card-models "H100|A100-80GB", exclude-card-models "L4", card-uuids "GPU-1,GPU-2"`
	if got := req.Cards.String(); got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got := (CardChoice{}).String(); got != "" {
		t.Errorf("empty choice String() = %q", got)
	}
}

func BenchmarkModelPatternMatches(b *testing.B) {
	p, _ := ParseModelPattern("A100-80GB")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if p.Matches(h100) {
			b.Fatal("match")
		}
	}
}

// uuidList is n distinct card UUIDs joined by ",".
func uuidList(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)
	}
	return strings.Join(out, ",")
}
