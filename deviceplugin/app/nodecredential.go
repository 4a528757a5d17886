package app

import (
	"context"
	"errors"
	"fmt"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Clients are the plugin's ways to the API server. Write (--kubeconfig: the
// pod's service account) makes every write (records, the Node's inventory,
// events, evictions, DRA's slices) and the reads of other resources; Read
// (--node-kubeconfig: the node's own identity, the kubelet's) reads the
// node's pods and its Node, which the API server's Node authorizer allows
// that identity for this node only. Read nil: Write reads them too.
type Clients struct {
	Write, Read kubernetes.Interface
}

// ErrNotThisNode: --node-kubeconfig authenticates as someone other than
// this node.
var ErrNotThisNode = errors.New("--node-kubeconfig is not this node's identity")

// nodeUserPrefix and nodesGroup are the user name prefix and group of a
// node's identity, the ones the Node authorizer confines to that node.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// CheckNodeIdentity says whether u is node's own identity (user
// system:node:NODE in group system:nodes): only that identity's reads the
// Node authorizer confines to the node's pods and Node, so any other
// identity behind --node-kubeconfig is refused rather than read with.
func CheckNodeIdentity(u authenticationv1.UserInfo, node string) error {
	want := nodeUserPrefix + node
	if u.Username != want || !slices.Contains(u.Groups, nodesGroup) {
		return fmt.Errorf("%w: it authenticates as %q in groups %v, not as %s in group %s; the API server confines only that identity's reads to this node. Point --node-kubeconfig (the chart: devicePlugin.nodeCredential) at this node's kubelet kubeconfig, or leave it empty to read with the service account", ErrNotThisNode, u.Username, u.Groups, want, nodesGroup)
	}
	return nil
}

// readClient returns the client the plugin reads its node's pods and Node
// with: clients.Read once the API server says it is this node's identity
// (CheckNodeIdentity), else clients.Write.
func readClient(ctx context.Context, clients Clients, node string) (kubernetes.Interface, error) {
	if clients.Read == nil {
		return clients.Write, nil
	}
	review, err := clients.Read.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("--node-kubeconfig: asking the API server who it is: %w", err)
	}
	if err := CheckNodeIdentity(review.Status.UserInfo, node); err != nil {
		return nil, err
	}
	return clients.Read, nil
}
