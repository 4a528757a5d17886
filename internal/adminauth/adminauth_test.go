package adminauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	if _, err := New(Options{Mode: "tls"}, apiServer(t)); err == nil || !strings.Contains(err.Error(), "want delegated, token or none") {
		t.Fatalf("err = %v", err)
	}
}

func TestTokenModeAcceptsOnlyTheScrapeTokenAndAsksNobody(t *testing.T) {
	scrape := strings.Repeat("s3cret", 8)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(scrape+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No client: any TokenReview or SubjectAccessReview would panic.
	g, err := New(Options{Mode: Token, TokenFile: file}, nil, "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	h := g.Wrap(ok)
	get := func(path, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/metrics", "Bearer "+scrape); rec.Code != 200 || rec.Body.String() != "served" {
		t.Errorf("the scrape token: %d %s, want 200 served", rec.Code, rec.Body.String())
	}
	for _, auth := range []string{"", "Bearer " + scrape[:len(scrape)-1], "Bearer " + scrape + "x", "Basic " + scrape, "Bearer a-service-account-token"} {
		if rec := get("/metrics", auth); rec.Code != 401 || !strings.Contains(rec.Body.String(), "metrics-token") {
			t.Errorf("Authorization %q: %d %s, want 401 naming the Secret", auth, rec.Code, rec.Body.String())
		}
	}
	if rec := get("/readyz", ""); rec.Code != 200 {
		t.Errorf("probe without a token: %d, want 200", rec.Code)
	}
}

func TestTokenModeRefusesAMissingOrShortToken(t *testing.T) {
	if _, err := New(Options{Mode: Token}, nil); err == nil || !strings.Contains(err.Error(), "needs adminAuth.tokenFile") {
		t.Errorf("no file: err = %v", err)
	}
	short := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Mode: Token, TokenFile: short}, nil); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Errorf("short token: err = %v", err)
	}
}
