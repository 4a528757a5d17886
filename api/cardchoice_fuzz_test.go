package api

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzCardChoice: whatever a user writes in the card-choice and policy
// annotations, RequestFromPod keeps the demand and either reports
// ErrInvalidPodAnnotation with an empty choice, or gives a choice where
// every model entry has words and matches its own text, every listed UUID
// is allowed and has no space, and the policy is trimmed and not empty.
func FuzzCardChoice(f *testing.F) {
	for _, s := range [][4]string{
		{"H100|A100-80GB", "L4", "GPU-1,GPU-2", "spread"}, {"", "", "", ""}, {"H100||A100", "-", "GPU a", " "},
		{"NVIDIA A100-SXM4-40GB", "a10,", "|", "frag"}, {" ,", "ü", "GPU-1|GPU-2", "binpack\n"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, models, exclude, uuids, policy string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			DefaultNames().AnnotationCardModels(): models, DefaultNames().AnnotationExcludeCardModels(): exclude, DefaultNames().AnnotationCardUUIDs(): uuids, DefaultNames().AnnotationPolicy(): policy,
		}}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("c", "4", "")}}}
		req, err := DefaultNames().RequestFromPod(pod)
		if err != nil || len(req.Containers) != 1 {
			t.Fatalf("the demand must not depend on the annotations: %+v %v", req.Containers, err)
		}
		if req.ChoiceErr != nil {
			if !errors.Is(req.ChoiceErr, ErrInvalidPodAnnotation) || !req.Cards.Empty() || req.Policy != "" {
				t.Fatalf("ChoiceErr %v with choice %+v policy %q", req.ChoiceErr, req.Cards, req.Policy)
			}
			return
		}
		for _, p := range append(append([]ModelPattern{}, req.Cards.Models...), req.Cards.ExcludeModels...) {
			if len(p.words) == 0 || !p.Matches(p.Text) {
				t.Fatalf("entry %q: words %q, matches itself %v", p.Text, p.words, p.Matches(p.Text))
			}
		}
		for _, u := range req.Cards.UUIDs {
			if u == "" || strings.ContainsAny(u, " \t\n|,") || !req.Cards.AllowsUUID(u) {
				t.Fatalf("UUID %q from %q", u, uuids)
			}
		}
		if req.Policy == "" || req.Policy != strings.TrimSpace(req.Policy) {
			t.Fatalf("policy %q from %q", req.Policy, policy)
		}
	})
}
