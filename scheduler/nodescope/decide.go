// Package nodescope is an authorization webhook (SubjectAccessReview v1) that
// confines the device plugin's reads to its own node. RBAC cannot: a rule
// names resources and verbs, never the field selector of a list. The API
// server hands an authorization webhook the field selector of every list and
// watch, and the node a token is bound to (the user's extra
// authentication.kubernetes.io/node-name); Decide allows a scoped user to read
// only its own node's pods and its own Node, denies its other reads of them
// with what to do instead, and has no opinion on anything else (RBAC and the
// admission policies decide writes).
package nodescope

import (
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNameExtra is the user extra that names the node a service account
// token is bound to (a pod's projected token on that node).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Verdict is a webhook's answer: allow, deny (no later authorizer is asked),
// or no opinion (the next authorizer, RBAC, decides).
type Verdict int

const (
	NoOpinion Verdict = iota
	Allow
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return "no-opinion"
}

// Decision is Decide's answer and its reason (shown to the client on a denial).
type Decision struct {
	Verdict Verdict
	Reason  string
}

// Users is the set of usernames confined to their node (the device plugin's
// service account, system:serviceaccount:NAMESPACE:NAME).
type Users map[string]bool

// Decide answers spec for the users in scoped:
//   - pods: list and watch only with the field selector spec.nodeName=NODE
//     (other requirements may narrow it further, e.g. metadata.name=NAME for
//     one pod); get is denied (the pod's node is not in the request: read one
//     pod by listing with both selectors).
//   - nodes: get of NODE; list and watch only with metadata.name=NODE.
//   - a scoped user's token without a node: every read of pods and nodes
//     denied.
//
// Everything else, and every other user, gets no opinion.
func Decide(scoped Users, spec authorizationv1.SubjectAccessReviewSpec) Decision {
	ra := spec.ResourceAttributes
	if !scoped[spec.User] || ra == nil || ra.Group != "" || ra.Subresource != "" {
		return Decision{Verdict: NoOpinion}
	}
	if ra.Resource != "pods" && ra.Resource != "nodes" {
		return Decision{Verdict: NoOpinion}
	}
	read := ra.Verb == "get" || ra.Verb == "list" || ra.Verb == "watch"
	if !read {
		return Decision{Verdict: NoOpinion}
	}
	node := ""
	if v := spec.Extra[NodeNameExtra]; len(v) == 1 {
		node = v[0]
	}
	if node == "" {
		return deny("%s reads %s only with a token bound to a pod on its node, and this token names no node: run it as the DaemonSet's pod (its projected service account token carries %s)", spec.User, ra.Resource, NodeNameExtra)
	}
	switch {
	case ra.Resource == "pods" && ra.Verb == "get":
		return deny("%s may not get a pod by name (the request does not say the pod's node): list pods with the field selector spec.nodeName=%s,metadata.name=%s instead", spec.User, node, ra.Name)
	case ra.Resource == "pods":
		if selects(ra.FieldSelector, "spec.nodeName", node) {
			return Decision{Verdict: Allow, Reason: fmt.Sprintf("pods of its own node %s", node)}
		}
		return deny("%s may %s only the pods of its own node: add the field selector spec.nodeName=%s", spec.User, ra.Verb, node)
	case ra.Verb == "get":
		if ra.Name == node {
			return Decision{Verdict: Allow, Reason: fmt.Sprintf("its own Node %s", node)}
		}
		return deny("%s may get only its own Node %s, not %q", spec.User, node, ra.Name)
	default:
		if selects(ra.FieldSelector, "metadata.name", node) {
			return Decision{Verdict: Allow, Reason: fmt.Sprintf("its own Node %s", node)}
		}
		return deny("%s may %s only its own Node: add the field selector metadata.name=%s", spec.User, ra.Verb, node)
	}
}

func deny(format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: fmt.Sprintf(format, args...)}
}

// selects reports whether fs limits the request to objects whose field is
// value: one of its requirements (all of which must hold) is field = value,
// which the API server sends as field In (value). The raw selector is ignored, as the API advises
// webhooks to: the API server sends parsed requirements.
func selects(fs *authorizationv1.FieldSelectorAttributes, field, value string) bool {
	if fs == nil {
		return false
	}
	for _, r := range fs.Requirements {
		if r.Key != field {
			continue
		}
		if r.Operator == metav1.FieldSelectorOpIn && len(r.Values) == 1 && r.Values[0] == value {
			return true
		}
	}
	return false
}
