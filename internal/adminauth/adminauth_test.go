package adminauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiServer is a stand-in for the API server's TokenReview and
// SubjectAccessReview endpoints (the delegating authenticator and authorizer
// post to them through the client's REST client, which a fake clientset
// lacks): it knows two tokens and allows get on /metrics to "reader" only.
func apiServer(t *testing.T) kubernetes.Interface {
	users := map[string]string{"reader-token": "reader", "other-token": "other"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authnv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if name, ok := users[tr.Spec.Token]; ok {
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: name}}
			}
			out = &tr
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authzv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			nr := sar.Spec.NonResourceAttributes
			sar.Status.Allowed = sar.Spec.User == "reader" && nr != nil && nr.Path == "/metrics" && nr.Verb == "get"
			out = &sar
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
}

func TestGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	for _, tc := range []struct {
		name, mode, path, token string
		want                    int
		body                    string
	}{
		{name: "a reader gets /metrics", mode: Delegated, path: "/metrics", token: "reader-token", want: 200, body: "served"},
		{name: "no token is refused and told what to send", mode: Delegated, path: "/metrics", want: 401, body: "bearer token"},
		{name: "an unknown token is refused", mode: Delegated, path: "/metrics", token: "forged", want: 401},
		{name: "an identity without the role is refused and told which role", mode: Delegated, path: "/metrics", token: "other-token", want: 403, body: `nonResourceURLs [\"/metrics\"]`},
		{name: "a reader of /metrics does not read /inspect", mode: Delegated, path: "/inspect/node-a", token: "reader-token", want: 403, body: `/inspect/*`},
		{name: "probes need no token", mode: Delegated, path: "/healthz", want: 200, body: "served"},
		{name: "none serves anyone", mode: None, path: "/metrics", want: 200, body: "served"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(Options{Mode: tc.mode}, apiServer(t), "/healthz", "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			g.Wrap(ok).ServeHTTP(rec, req)
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("GET %s: %d %s, want %d containing %q", tc.path, rec.Code, rec.Body.String(), tc.want, tc.body)
			}
		})
	}
}

func TestUnknownModeSaysWhatToSet(t *testing.T) {
	if _, err := New(Options{Mode: "tls"}, apiServer(t)); err == nil || !strings.Contains(err.Error(), "want delegated or none") {
		t.Fatalf("err = %v", err)
	}
}
