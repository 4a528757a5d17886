package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Workload is one of gpushare's own workloads (the chart's device-plugin DaemonSet or scheduler
// Deployment) as the health view sees it.
type Workload struct {
	Kind, Name string
	// Ready of Desired pods are ready; Updated of them run the current template.
	Ready, Updated, Desired int32
}

// Health is the verdict of `kubectl inspect gpushare health`: Problems is empty when healthy.
type Health struct {
	Nodes, Cards int
	Workloads    []Workload
	Problems     []string
}

// ErrUnhealthy is returned (wrapped) by the health view when it found a problem: the command
// exits non-zero.
var ErrUnhealthy = errors.New("gpushare is not healthy")

// CheckHealth judges a view and the workloads found in the release namespace ns: every GPU node
// reports consistently (no warning of the view but a transient TerminatingOverlap, or
// DRAUnreadable, which is about the caller's permissions), there is at least one, and each
// workload has all its pods ready and updated. Each problem says what to do.
func CheckHealth(v View, workloads []Workload, ns string) Health {
	h := Health{Nodes: len(v.Nodes), Workloads: workloads}
	for _, n := range v.Nodes {
		h.Cards += len(n.Cards)
	}
	if h.Nodes == 0 {
		h.Problems = append(h.Problems, "no node reports GPU cards: label the GPU nodes gpushare=true (the chart's devicePlugin.nodeSelector) and check the device plugin's pods")
	}
	for _, w := range v.Warnings {
		if w.Code == WarnTerminatingOverlap || w.Code == WarnDRAUnreadable {
			continue
		}
		where := w.Node
		if w.Pod != "" {
			where = "pod " + w.Pod
		}
		h.Problems = append(h.Problems, fmt.Sprintf("%s: %s (%s)", where, w.Message, w.Code))
	}
	kinds := map[string]bool{}
	for _, w := range workloads {
		kinds[w.Kind] = true
		switch {
		case w.Desired == 0 && w.Kind == "DaemonSet":
			h.Problems = append(h.Problems, fmt.Sprintf("%s %s/%s runs on no node: label the GPU nodes with its nodeSelector", w.Kind, ns, w.Name))
		case w.Ready < w.Desired || w.Updated < w.Desired:
			h.Problems = append(h.Problems, fmt.Sprintf("%s %s/%s: %d of %d pods ready, %d updated: kubectl -n %s describe %s %s, and the logs of its pods",
				w.Kind, ns, w.Name, w.Ready, w.Desired, w.Updated, ns, strings.ToLower(w.Kind), w.Name))
		}
	}
	for _, k := range []string{"DaemonSet", "Deployment"} {
		if !kinds[k] {
			what := map[string]string{"DaemonSet": "device plugin DaemonSet", "Deployment": "scheduler Deployment"}[k]
			h.Problems = append(h.Problems, fmt.Sprintf("no gpushare %s in namespace %s: is the chart installed there (--release-namespace)?", what, ns))
		}
	}
	return h
}

// workloads lists the chart's DaemonSets and Deployments in ns (label app.kubernetes.io/component
// device-plugin or scheduler, as the chart sets it).
func workloads(ctx context.Context, client kubernetes.Interface, ns string) ([]Workload, error) {
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/component in (device-plugin,scheduler)"}
	dss, err := client.AppsV1().DaemonSets(ns).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("list the device plugin's DaemonSets in %s: %w", ns, err)
	}
	var out []Workload
	for _, d := range dss.Items {
		out = append(out, Workload{Kind: "DaemonSet", Name: d.Name, Ready: d.Status.NumberReady,
			Updated: d.Status.UpdatedNumberScheduled, Desired: d.Status.DesiredNumberScheduled})
	}
	deps, err := client.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("list the scheduler's Deployments in %s: %w", ns, err)
	}
	for _, d := range deps.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		out = append(out, Workload{Kind: "Deployment", Name: d.Name, Ready: d.Status.ReadyReplicas,
			Updated: d.Status.UpdatedReplicas, Desired: want})
	}
	return out, nil
}

// PrintHealth writes "healthy: …" or "unhealthy:" and one problem a line.
func PrintHealth(w io.Writer, h Health) {
	var ws []string
	for _, wl := range h.Workloads {
		ws = append(ws, fmt.Sprintf("%s %s %d/%d ready", wl.Kind, wl.Name, wl.Ready, wl.Desired))
	}
	if len(h.Problems) == 0 {
		fmt.Fprintf(w, "healthy: %d GPU nodes, %d cards reporting consistently; %s\n", h.Nodes, h.Cards, strings.Join(ws, ", "))
		return
	}
	fmt.Fprintf(w, "unhealthy: %d problems (%d GPU nodes, %d cards; %s)\n", len(h.Problems), h.Nodes, h.Cards, strings.Join(ws, ", "))
	for _, p := range h.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// renderHealth reads the cluster once and prints the health verdict; an unhealthy one is an error.
func (o *Options) renderHealth(ctx context.Context, w io.Writer) error {
	c, err := o.gather(ctx)
	if err != nil {
		return err
	}
	client, err := o.kubeClient()
	if err != nil {
		return err
	}
	wls, err := workloads(ctx, client, o.ReleaseNamespace)
	if err != nil {
		return err
	}
	h := CheckHealth(Build(o.names(), c), wls, o.ReleaseNamespace)
	PrintHealth(w, h)
	if len(h.Problems) > 0 {
		return fmt.Errorf("%w: %d problems", ErrUnhealthy, len(h.Problems))
	}
	return nil
}
