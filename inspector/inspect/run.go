package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpushare/gpushare/api"
)

// Run prints the view once, or, with Watch, again every Interval until ctx
// ends. While watching, a failure after the first view is printed on the
// error stream and the next tick tries again.
func (o *Options) Run(ctx context.Context) error {
	ctx = cmp.Or(ctx, context.Background())
	if !o.Watch {
		return o.render(ctx, o.Out)
	}
	ticker := o.Clock.NewTicker(o.Interval)
	defer ticker.Stop()
	for frame := 0; ; frame++ {
		if o.Output == OutputTable {
			if frame > 0 {
				fmt.Fprintln(o.Out)
			}
			fmt.Fprintf(o.Out, "Every %s, at %s (Ctrl-C stops):\n\n", o.Interval, o.Clock.Now().Format("15:04:05"))
		} else if o.Output == OutputYAML && frame > 0 {
			fmt.Fprintln(o.Out, "---")
		}
		if err := o.render(ctx, o.Out); err != nil {
			if frame == 0 || ctx.Err() != nil {
				return err
			}
			fmt.Fprintf(o.ErrOut, "error: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// render reads the cluster once and prints the view asked for.
func (o *Options) render(ctx context.Context, w io.Writer) error {
	if o.Pending {
		return o.renderPending(ctx, w)
	}
	if o.Health {
		return o.renderHealth(ctx, w)
	}
	v, err := o.view(ctx)
	if err != nil {
		return err
	}
	oneNode := o.NodeName != ""
	switch {
	case o.Output == OutputJSON:
		return PrintJSON(w, v)
	case o.Output == OutputYAML:
		return PrintYAML(w, v)
	case o.Details:
		return PrintDetails(w, o.names(), v, oneNode)
	default:
		return PrintTable(w, o.names(), v, oneNode)
	}
}

// renderPending prints the GPU pods waiting for a node.
func (o *Options) renderPending(ctx context.Context, w io.Writer) error {
	c, err := o.gather(ctx)
	if err != nil {
		return err
	}
	v := Filter{Model: o.model}.Apply(Build(o.names(), c))
	var mine []corev1.Pod
	for _, p := range c.Pods {
		if (o.Namespace == "" || p.Namespace == o.Namespace) && (o.selector == nil || o.selector.Matches(labels.Set(p.Labels))) {
			mine = append(mine, p)
		}
	}
	pv := BuildPending(o.names(), v, mine)
	switch o.Output {
	case OutputJSON:
		return printJSON(w, pv)
	case OutputYAML:
		return printYAML(w, pv)
	}
	return PrintPending(w, pv)
}

// view reads the data from the extender or from the API server, narrowed
// by the filters.
func (o *Options) view(ctx context.Context) (View, error) {
	f := Filter{Model: o.model, Namespace: o.Namespace}
	if o.FromExtender != "" {
		v, err := FromExtender(ctx, o.HTTPClient, o.FromExtender, o.NodeName)
		return f.Apply(v), err
	}
	c, err := o.gather(ctx)
	if err != nil {
		return View{}, err
	}
	if o.selector != nil {
		f.Nodes = map[string]bool{}
		for _, n := range c.Nodes {
			if o.selector.Matches(labels.Set(n.Labels)) {
				f.Nodes[n.Name] = true
			}
		}
	}
	return f.Apply(Build(o.names(), c)), nil
}

// gather reads the cluster from the API server (Gather), saying which
// server could not be reached.
func (o *Options) gather(ctx context.Context) (Cluster, error) {
	client, err := o.kubeClient()
	if err != nil {
		return Cluster{}, err
	}
	c, err := Gather(ctx, client, o.names(), o.NodeName)
	if err != nil {
		var status apierrors.APIStatus
		if o.server != "" && !errors.As(err, &status) && !errors.Is(err, ErrNodeNotFound) && !errors.Is(err, ErrNotGPUNode) {
			return Cluster{}, fmt.Errorf("cannot reach the Kubernetes API server at %s: %w", o.server, err)
		}
		return Cluster{}, err
	}
	return c, nil
}

// names are the configured names; Validate has checked them.
func (o *Options) names() api.Names {
	n, err := o.Names.Names()
	if err != nil {
		return api.DefaultNames()
	}
	return n
}
