package inspect

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
// exists but has no names.ResourceName capacity, inventory or gpushare label.
var ErrNotGPUNode = errors.New("not a GPU node")

// Gather reads the nodes and the pods that may hold GPU memory: every node
// and pod, or, when nodeName is set, that node and the pods bound to it.
// Finished pods (Succeeded, Failed: they hold no units, api.HoldsUnits) are
// filtered out by the API server; Build applies api.HoldsUnits itself, so a
// server that ignores field selectors changes nothing.
func Gather(ctx context.Context, client kubernetes.Interface, names api.Names, nodeName string) ([]corev1.Node, []corev1.Pod, error) {
	podSelector := fields.AndSelectors(
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	)
	var nodes []corev1.Node
	if nodeName != "" {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("node %q: %w", nodeName, ErrNodeNotFound)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read node %q: %w", nodeName, err)
		}
		if !IsGPUNode(names, n) {
			return nil, nil, fmt.Errorf("node %q: %w: it has no %s capacity, no gpushare inventory and no %s=%s label", nodeName, ErrNotGPUNode, names.ResourceName(), api.LabelEnabled, api.LabelEnabledValue)
		}
		nodes = []corev1.Node{*n}
		podSelector = fields.AndSelectors(podSelector, fields.OneTermEqualSelector("spec.nodeName", nodeName))
	} else {
		var err error
		nodes, err = listNodes(ctx, client)
		if err != nil {
			return nil, nil, err
		}
	}
	pods, err := listPods(ctx, client, podSelector.String())
	if err != nil {
		return nil, nil, err
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
	return nodes, pods, nil
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
