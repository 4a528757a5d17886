package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/api"
)

// pageSize is how many objects one list request asks for, as kubectl does.
const pageSize = 500

// ErrNodeNotFound is returned (wrapped) when the node named on the command
// line does not exist.
var ErrNodeNotFound = errors.New("node not found")

// ErrNotGPUNode is returned (wrapped) when the node named on the command line
// exists but has no names.ResourceName capacity, inventory, gpushare label,
// ResourceSlice of the gpushare DRA driver or claims of it.
var ErrNotGPUNode = errors.New("not a GPU node")

// Cluster is what the inspector reads from the API server: the nodes, the
// pods that may hold GPU memory, and the DRA objects of the gpushare
// driver.
type Cluster struct {
	Nodes []corev1.Node
	Pods  []corev1.Pod
	DRA   DRA
}

// DRA is the gpushare DRA driver's side of the cluster: its ResourceSlices
// and the ResourceClaims (Build keeps the allocation results of the driver,
// api.Names.DRAUsage).
type DRA struct {
	Slices []resourceapi.ResourceSlice
	Claims []resourceapi.ResourceClaim
	// Unreadable, when set, says why they could not be read (the user may
	// not list them); Build then warns (WarnDRAUnreadable) and shows the
	// rest.
	Unreadable string
}

// Gather reads the nodes and the pods that may hold GPU memory, and the DRA
// objects (GatherDRA): every node and pod, or, when nodeName is set, that
// node and the pods bound to it. Finished pods (Succeeded, Failed: they hold
// no units, api.HoldsUnits) are filtered out by the API server; Build
// applies api.HoldsUnits itself, so a server that ignores field selectors
// changes nothing.
func Gather(ctx context.Context, client kubernetes.Interface, names api.Names, nodeName string) (Cluster, error) {
	podSelector := fields.AndSelectors(
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	)
	var nodes []corev1.Node
	var dra DRA
	if nodeName != "" {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Cluster{}, fmt.Errorf("node %q: %w", nodeName, ErrNodeNotFound)
		}
		if err != nil {
			return Cluster{}, fmt.Errorf("cannot read node %q: %w", nodeName, err)
		}
		if dra, err = GatherDRA(ctx, client, names, nodeName); err != nil {
			return Cluster{}, err
		}
		if !IsGPUNode(names, n) && len(dra.Slices) == 0 && len(dra.Claims) == 0 { // both are this node's only
			return Cluster{}, fmt.Errorf("node %q: %w: it has no %s capacity, no gpushare inventory, no %s=%s or %s=%s label, no gpushare ResourceSlice and no gpushare claims",
				nodeName, ErrNotGPUNode, names.ResourceName(), api.LabelEnabled, api.LabelEnabledValue, names.LabelDRA(), api.LabelEnabledValue)
		}
		nodes = []corev1.Node{*n}
		podSelector = fields.AndSelectors(podSelector, fields.OneTermEqualSelector("spec.nodeName", nodeName))
	} else {
		var err error
		if nodes, err = listNodes(ctx, client); err != nil {
			return Cluster{}, err
		}
		if dra, err = GatherDRA(ctx, client, names, ""); err != nil {
			return Cluster{}, err
		}
	}
	pods, err := listPods(ctx, client, podSelector.String())
	if err != nil {
		return Cluster{}, err
	}
	if nodeName != "" {
		// A server (or fake) that ignored the selector must not leak pods of
		// other nodes into a one-node view.
		kept := pods[:0]
		for _, p := range pods {
			if p.Spec.NodeName == nodeName {
				kept = append(kept, p)
			}
		}
		pods = kept
	}
	return Cluster{Nodes: nodes, Pods: pods, DRA: dra}, nil
}

func listNodes(ctx context.Context, client kubernetes.Interface) ([]corev1.Node, error) {
	return listAll(ctx, metav1.ListOptions{}, "nodes", client.CoreV1().Nodes().List, func(l *corev1.NodeList) []corev1.Node { return l.Items })
}

func listPods(ctx context.Context, client kubernetes.Interface, fieldSelector string) ([]corev1.Pod, error) {
	return listAll(ctx, metav1.ListOptions{FieldSelector: fieldSelector}, "pods", client.CoreV1().Pods(metav1.NamespaceAll).List, func(l *corev1.PodList) []corev1.Pod { return l.Items })
}

// listAll lists every object list returns for opts, pageSize at a time,
// following the continue token; items takes a page's objects. what names
// the objects in the error.
func listAll[L interface{ GetContinue() string }, T any](ctx context.Context, opts metav1.ListOptions, what string, list func(context.Context, metav1.ListOptions) (L, error), items func(L) []T) ([]T, error) {
	opts.Limit = pageSize
	var out []T
	for {
		l, err := list(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("cannot list %s: %w", what, err)
		}
		out = append(out, items(l)...)
		if l.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = l.GetContinue()
	}
}

// GatherDRA reads the gpushare DRA driver's ResourceSlices (only nodeName's
// when set) and the ResourceClaims (only those allocated on nodeName when
// set). A cluster that serves no resource.k8s.io/v1 has neither: an empty
// DRA. What the user may not list is left empty and DRA.Unreadable says
// which permission to ask for: the rest of the view is still shown. Other
// errors are returned.
func GatherDRA(ctx context.Context, client kubernetes.Interface, names api.Names, nodeName string) (DRA, error) {
	sel := fields.OneTermEqualSelector("spec.driver", names.DRADriver())
	if nodeName != "" {
		sel = fields.AndSelectors(sel, fields.OneTermEqualSelector("spec.nodeName", nodeName))
	}
	slices, serr := listAll(ctx, metav1.ListOptions{FieldSelector: sel.String()}, "resourceslices", client.ResourceV1().ResourceSlices().List,
		func(l *resourceapi.ResourceSliceList) []resourceapi.ResourceSlice { return l.Items })
	claims, cerr := listAll(ctx, metav1.ListOptions{}, "resourceclaims", client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List,
		func(l *resourceapi.ResourceClaimList) []resourceapi.ResourceClaim { return l.Items })
	var d DRA
	var forbidden []string
	for _, err := range []error{serr, cerr} {
		switch {
		case err == nil, apierrors.IsNotFound(err): // not found: the API server serves no resource.k8s.io/v1, so no DRA here
		case apierrors.IsForbidden(err):
			forbidden = append(forbidden, err.Error())
		default:
			return DRA{}, err
		}
	}
	if len(forbidden) > 0 {
		d.Unreadable = strings.Join(forbidden, "; ") + "; so DRA claims are not counted and DRA nodes may be missing. To see them, ask for list on resourceslices and resourceclaims of the API group resource.k8s.io " +
			"(e.g. kubectl create clusterrole gpushare-dra-reader --verb=list --resource=resourceslices.resource.k8s.io,resourceclaims.resource.k8s.io, bound to you with a clusterrolebinding)"
	}
	if nodeName != "" {
		// A server (or fake) that ignored the selector, and the claims of
		// other nodes, stay out of a one-node view.
		slices = keepEach(slices, func(s resourceapi.ResourceSlice) bool { return s.Spec.Pool.Name == nodeName })
		claims = keepEach(claims, func(c resourceapi.ResourceClaim) bool { return allocatedOn(names, &c, nodeName) })
	}
	d.Slices, d.Claims = slices, claims
	return d, nil
}

// allocatedOn reports whether the claim has a result of the gpushare driver
// on node's pool.
func allocatedOn(names api.Names, c *resourceapi.ResourceClaim, node string) bool {
	if c.Status.Allocation == nil {
		return false
	}
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == names.DRADriver() && r.Pool == node
	})
}
