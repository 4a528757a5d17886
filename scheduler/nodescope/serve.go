package nodescope

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/klog/v2"
)

// Path is where Handler answers SubjectAccessReviews.
const Path = "/authorize"

// maxReviewBytes bounds a review's body: a SubjectAccessReview is a few
// hundred bytes (a user, its groups and extra, one request's attributes).
const maxReviewBytes = 256 << 10

// Handler serves the webhook at Path: it reads a SubjectAccessReview
// (authorization.k8s.io/v1), answers it with Decide and counts the answers
// in reg (gpushare_node_scope_decisions_total{resource,verdict}) when reg is
// not nil. A body that is not a v1 SubjectAccessReview gets 400; the API
// server then applies the webhook's failurePolicy.
func Handler(scoped Users, reg prometheus.Registerer, logger klog.Logger) http.Handler {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpushare_node_scope_decisions_total",
		Help: "Authorization webhook answers for the node-scoped users, by resource (pods, nodes, other) and verdict (allow, deny, no-opinion).",
	}, []string{"resource", "verdict"})
	if reg != nil {
		reg.MustRegister(decisions)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		review, err := readReview(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d := Decide(scoped, review.Spec)
		resource := "other"
		if ra := review.Spec.ResourceAttributes; ra != nil && (ra.Resource == "pods" || ra.Resource == "nodes") {
			resource = ra.Resource
		}
		decisions.WithLabelValues(resource, d.Verdict.String()).Inc()
		if d.Verdict == Deny {
			logger.V(2).Info("Denied", "user", review.Spec.User, "reason", d.Reason)
		}
		review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: d.Verdict == Allow, Denied: d.Verdict == Deny, Reason: d.Reason}
		review.Spec = authorizationv1.SubjectAccessReviewSpec{}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

func readReview(w http.ResponseWriter, r *http.Request) (authorizationv1.SubjectAccessReview, error) {
	var review authorizationv1.SubjectAccessReview
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err := dec.Decode(&review); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return review, fmt.Errorf("a SubjectAccessReview over %d bytes", maxReviewBytes)
		}
		return review, fmt.Errorf("not a SubjectAccessReview: %w", err)
	}
	if want := authorizationv1.SchemeGroupVersion.String(); review.APIVersion != want || review.Kind != "SubjectAccessReview" {
		return review, fmt.Errorf("got %s %s, want a SubjectAccessReview of %s (set subjectAccessReviewVersion: v1 in the API server's authorization configuration)", review.APIVersion, review.Kind, want)
	}
	return review, nil
}
