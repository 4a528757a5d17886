// Package adminauth guards the programs' read-only HTTP endpoints (the
// extender's /inspect and /metrics, the device plugin's /metrics) the way
// Kubernetes components guard theirs: a request carries a bearer token,
// which the API server checks (TokenReview, delegated authentication), and
// the token's identity must be allowed the request's verb on the path
// (SubjectAccessReview on a non-resource URL, delegated authorization), e.g.
// `get` on `/metrics` — what kube-scheduler's own /metrics asks. Both
// checks come from k8s.io/apiserver; answers are cached briefly, so a
// Prometheus scrape costs the API server nothing most of the time.
//
// Token mode (token.go) compares the bearer token with a shared scrape
// token from a file instead: no API server round trip, so a node's
// program needs no TokenReview or SubjectAccessReview rights, and a flood
// of forged tokens costs the API server nothing.
//
// Probes (/healthz, /readyz) stay open: the kubelet sends no token.
package adminauth

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
)

// Modes of adminAuth.mode.
const (
	// Delegated asks the API server who the caller is (TokenReview) and
	// whether it may make the request (SubjectAccessReview). The default.
	Delegated = "delegated"
	// Token accepts one bearer token, read from Options.TokenFile.
	Token = "token"
	// None serves every request to whoever reaches the port.
	None = "none"
)

// Cache lifetimes and the retry budget of the API server's answers. A
// token's answer is kept 10 s (kube's delegated default); a revoked
// binding takes effect within that.
const (
	CacheTTL       = 10 * time.Second
	requestTimeout = 10 * time.Second
)

// Options say who may read a program's guarded endpoints (adminAuth in its configuration file).
type Options struct {
	// Mode is delegated (a bearer token the API server accepts, whose identity may get the path:
	// a ClusterRole with nonResourceURLs, e.g. [/metrics], verbs [get]; the program needs the
	// system:auth-delegator ClusterRole), token (the bearer token in tokenFile; no API server
	// call) or none (anyone who reaches the port).
	Mode string `json:"mode"`
	// TokenFile holds the one bearer token token mode accepts (e.g. a mounted Secret key).
	TokenFile string `json:"tokenFile"`
}

// DefaultOptions authenticates and authorizes every guarded request.
func DefaultOptions() Options { return Options{Mode: Delegated} }

// Validate says what to change when Mode is unknown.
func (o Options) Validate() error {
	switch o.Mode {
	case Delegated, None:
		return nil
	case Token:
		if o.TokenFile == "" {
			return fmt.Errorf("adminAuth.mode %s needs adminAuth.tokenFile (the file holding the bearer token to accept)", Token)
		}
		return nil
	}
	return fmt.Errorf("adminAuth.mode %q: want %s, %s or %s", o.Mode, Delegated, Token, None)
}

// Guard wraps handlers with the checks of one Options.
type Guard struct {
	open  sets.Set[string]
	authn func(http.Handler) http.Handler
	authz authorizer.UnconditionalAuthorizer
}

// New returns the guard for o: with Delegated, client asks the API server
// (give it its own request budget: every new token costs a TokenReview and
// a SubjectAccessReview); open are the paths served to anyone (probes).
func New(o Options, client kubernetes.Interface, open ...string) (*Guard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{open: sets.New(open...)}
	switch o.Mode {
	case None:
		return g, nil
	case Token:
		return g.withToken(o.TokenFile)
	}
	if client == nil {
		return nil, fmt.Errorf("adminAuth.mode %s needs a Kubernetes client", Delegated)
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: requestTimeout,
		WebhookRetryBackoff:      backoff,
		CacheTTL:                 CacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             CacheTTL,
		DenyCacheTTL:              CacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	g.authn = func(h http.Handler) http.Handler {
		return filters.WithRequestInfo(filters.WithAuthentication(h, authn, http.HandlerFunc(unauthorized), nil, nil), resolver)
	}
	g.authz = authz
	return g, nil
}

// Wrap returns h behind the guard: requests for the open paths go straight
// to h; the others need an identity allowed the request.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	if g.authn == nil {
		return h
	}
	if g.authz == nil { // token mode: the token is the authorization
		return g.withOpenPaths(h, g.authn(h))
	}
	checked := g.authn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attrs, err := filters.GetAuthorizerAttributes(r.Context())
		if err != nil {
			writeStatus(w, http.StatusInternalServerError, "InternalError", fmt.Sprintf("authorizing %s: %v", r.URL.Path, err))
			return
		}
		decision, reason, err := g.authz.Authorize(r.Context(), attrs)
		if decision == authorizer.DecisionAllow {
			h.ServeHTTP(w, r)
			return
		}
		if err != nil {
			writeStatus(w, http.StatusInternalServerError, "InternalError", fmt.Sprintf("authorizing %s: the API server's SubjectAccessReview failed: %v", r.URL.Path, err))
			return
		}
		msg := fmt.Sprintf("%s may not %s %s. Give it a ClusterRole with nonResourceURLs [%q] and verbs [%s] (the gpushare chart's <release>-metrics-reader or <release>-inspect-reader)",
			attrs.GetUser().GetName(), attrs.GetVerb(), attrs.GetPath(), ruleURL(attrs.GetPath()), attrs.GetVerb())
		if reason != "" {
			msg += "; the API server said: " + reason
		}
		writeStatus(w, http.StatusForbidden, "Forbidden", msg+".")
	}))
	return g.withOpenPaths(h, checked)
}

// withOpenPaths serves the open paths with h and the others with checked.
func (g *Guard) withOpenPaths(h, checked http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.open.Has(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		checked.ServeHTTP(w, r)
	})
}

// ruleURL is the nonResourceURL a role needs for path: /inspect/NODE is
// covered by /inspect/*.
func ruleURL(path string) string {
	if i := strings.Index(strings.TrimPrefix(path, "/"), "/"); i >= 0 {
		return path[:i+1] + "/*"
	}
	return path
}

func unauthorized(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, http.StatusUnauthorized, "Unauthorized",
		fmt.Sprintf("%s needs a bearer token the Kubernetes API server accepts (Authorization: Bearer ..., e.g. a service account token, or `kubectl create token NAME`), of an identity allowed to read it.", r.URL.Path))
}

// writeStatus answers like the API server does: a metav1.Status in JSON.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": msg,
	})
}
