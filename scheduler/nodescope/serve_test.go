package nodescope

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

func TestHandlerAnswersReviews(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(Handler(Users{plugin: true}, reg, klog.Background()))
	defer srv.Close()
	post := func(body []byte) (*http.Response, authorizationv1.SubjectAccessReview) {
		t.Helper()
		resp, err := http.Post(srv.URL+Path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got authorizationv1.SubjectAccessReview
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
		}
		return resp, got
	}
	review := func(ra *authorizationv1.ResourceAttributes) []byte {
		b, _ := json.Marshal(authorizationv1.SubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
			Spec:     authorizationv1.SubjectAccessReviewSpec{User: plugin, Extra: map[string]authorizationv1.ExtraValue{NodeNameExtra: {"gpu-a"}}, ResourceAttributes: ra},
		})
		return b
	}

	resp, got := post(review(&authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}))
	if resp.StatusCode != http.StatusOK || got.Status.Allowed || !got.Status.Denied || !strings.Contains(got.Status.Reason, "spec.nodeName=gpu-a") {
		t.Fatalf("list every pod: %d %+v", resp.StatusCode, got.Status)
	}
	if got.APIVersion != "authorization.k8s.io/v1" || got.Kind != "SubjectAccessReview" {
		t.Errorf("answer is %s %s", got.APIVersion, got.Kind)
	}
	_, got = post(review(&authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods", FieldSelector: fields("spec.nodeName", "gpu-a")}))
	if !got.Status.Allowed || got.Status.Denied {
		t.Fatalf("watch its node's pods: %+v", got.Status)
	}
	_, got = post(review(&authorizationv1.ResourceAttributes{Verb: "create", Resource: "events"}))
	if got.Status.Allowed || got.Status.Denied {
		t.Fatalf("events: %+v, want no opinion", got.Status)
	}
	want := `
# HELP gpushare_node_scope_decisions_total Authorization webhook answers for the node-scoped users, by resource (pods, nodes, other) and verdict (allow, deny, no-opinion).
# TYPE gpushare_node_scope_decisions_total counter
gpushare_node_scope_decisions_total{resource="other",verdict="no-opinion"} 1
gpushare_node_scope_decisions_total{resource="pods",verdict="allow"} 1
gpushare_node_scope_decisions_total{resource="pods",verdict="deny"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpushare_node_scope_decisions_total"); err != nil {
		t.Error(err)
	}

	for name, body := range map[string][]byte{
		"not JSON":       []byte("{"),
		"another kind":   []byte(`{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview"}`),
		"over the limit": append([]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"`), bytes.Repeat([]byte("x"), maxReviewBytes)...),
	} {
		if resp, _ := post(body); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, resp.StatusCode)
		}
	}
}
