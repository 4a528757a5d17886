package nodescope

import (
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const plugin = "system:serviceaccount:gpushare-system:gpushare-device-plugin"

func fields(kv ...string) *authorizationv1.FieldSelectorAttributes {
	fs := &authorizationv1.FieldSelectorAttributes{}
	for i := 0; i+1 < len(kv); i += 2 {
		fs.Requirements = append(fs.Requirements, metav1.FieldSelectorRequirement{Key: kv[i], Operator: metav1.FieldSelectorOpIn, Values: []string{kv[i+1]}})
	}
	return fs
}

func TestDecide(t *testing.T) {
	scoped := Users{plugin: true}
	onA := map[string]authorizationv1.ExtraValue{NodeNameExtra: {"gpu-a"}}
	cases := []struct {
		name   string
		user   string
		extra  map[string]authorizationv1.ExtraValue
		ra     *authorizationv1.ResourceAttributes
		want   Verdict
		reason string // part of the reason, for denials
	}{
		{"list its node's pods", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: fields("spec.nodeName", "gpu-a")}, Allow, ""},
		{"watch its node's pods", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods", FieldSelector: fields("spec.nodeName", "gpu-a")}, Allow, ""},
		{"one pod of its node by list", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Namespace: "team", Resource: "pods", FieldSelector: fields("metadata.name", "job", "spec.nodeName", "gpu-a")}, Allow, ""},
		{"list every pod", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, Deny, "add the field selector spec.nodeName=gpu-a"},
		{"watch every pod", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods"}, Deny, "spec.nodeName=gpu-a"},
		{"list another node's pods", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: fields("spec.nodeName", "gpu-b")}, Deny, "only the pods of its own node"},
		{"list pods by name only", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: fields("metadata.name", "job")}, Deny, "spec.nodeName=gpu-a"},
		{"not-in selector", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpNotIn, Values: []string{"gpu-b"}}}}}, Deny, ""},
		{"another field equal to its node's name", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: fields("metadata.name", "gpu-a")}, Deny, ""},
		{"every node but its own", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpNotIn, Values: []string{"gpu-a"}}}}}, Deny, ""},
		{"raw selector only", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: &authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=gpu-a"}}, Deny, ""},
		{"get a pod", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "get", Namespace: "team", Resource: "pods", Name: "job"}, Deny, "spec.nodeName=gpu-a,metadata.name=job"},
		{"get its Node", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "gpu-a"}, Allow, ""},
		{"get another Node", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "gpu-b"}, Deny, "only its own Node gpu-a"},
		{"watch its Node", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "watch", Resource: "nodes", FieldSelector: fields("metadata.name", "gpu-a")}, Allow, ""},
		{"list every Node", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, Deny, "metadata.name=gpu-a"},
		{"token without a node", plugin, nil, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", FieldSelector: fields("spec.nodeName", "gpu-a")}, Deny, "names no node"},
		{"two node names", plugin, map[string]authorizationv1.ExtraValue{NodeNameExtra: {"gpu-a", "gpu-b"}}, &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "gpu-a"}, Deny, "names no node"},
		{"patch a pod: RBAC and admission decide", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "team", Resource: "pods", Name: "job"}, NoOpinion, ""},
		{"pod eviction", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "create", Namespace: "team", Resource: "pods", Subresource: "eviction", Name: "job"}, NoOpinion, ""},
		{"events", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "create", Namespace: "team", Resource: "events"}, NoOpinion, ""},
		{"pods of another group", plugin, onA, &authorizationv1.ResourceAttributes{Verb: "list", Group: "metrics.k8s.io", Resource: "pods"}, NoOpinion, ""},
		{"non-resource URL", plugin, onA, nil, NoOpinion, ""},
		{"another user", "system:serviceaccount:team:default", onA, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, NoOpinion, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(scoped, authorizationv1.SubjectAccessReviewSpec{User: c.user, Extra: c.extra, ResourceAttributes: c.ra})
			if d.Verdict != c.want {
				t.Fatalf("verdict %s (%s), want %s", d.Verdict, d.Reason, c.want)
			}
			if !strings.Contains(d.Reason, c.reason) {
				t.Errorf("reason %q, want it to say %q", d.Reason, c.reason)
			}
		})
	}
}
