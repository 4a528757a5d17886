package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxMismatchObjects is how many objects a mismatch message names before it
// says "and N more".
const maxMismatchObjects = 5

// NodeMismatches says, for people, where the cluster's nodes disagree with
// n: nodes whose inventory is published under another domain (their device
// plugin runs with another --domain), and nodes with n's inventory whose
// kubelet advertises neither n.ResourceName nor n.WholeResourceName (their
// device plugin runs with other resource names). One message per kind of
// mismatch, naming up to five nodes and what to change; empty when every node
// agrees (or has no gpushare inventory at all).
func (n Names) NodeMismatches(nodes []*corev1.Node) []string {
	foreign := map[string][]string{} // domain -> nodes
	var noResource []string
	for _, node := range nodes {
		if node == nil {
			continue
		}
		if _, ok := node.Annotations[n.AnnotationInventory()]; ok {
			_, mem := node.Status.Capacity[n.resource]
			_, whole := node.Status.Capacity[n.whole]
			if !mem && !whole && len(node.Status.Capacity) > 0 {
				noResource = append(noResource, node.Name)
			}
			continue
		}
		if d := foreignDomain(n, node.Annotations, "inventory"); d != "" {
			foreign[d] = append(foreign[d], node.Name)
		}
	}
	var out []string
	for _, d := range slices.Sorted(maps.Keys(foreign)) {
		out = append(out, fmt.Sprintf("a gpushare inventory under the domain %q (%s/inventory), not under this program's %q, is on %s: their device plugin runs with --domain=%s; give every gpushare program the same --domain (the chart's names.domain)",
			d, d, n.domain, objects("node", foreign[d]), d))
	}
	if len(noResource) > 0 {
		out = append(out, fmt.Sprintf("this program's inventory (%s) is on %s, which advertise neither %s nor %s: their device plugin runs with other resource names; give every gpushare program the same --resource-name and --whole-resource-name (the chart's names.resourceName, names.wholeResourceName)",
			n.AnnotationInventory(), objects("node", noResource), n.resource, n.whole))
	}
	return out
}

// PodMismatches says, for people, which pods carry an assignment record
// under another domain than n's (written by an extender that runs with
// another --domain): one message per domain, empty when none does.
func (n Names) PodMismatches(pods []*corev1.Pod) []string {
	foreign := map[string][]string{}
	for _, p := range pods {
		if p == nil {
			continue
		}
		if _, ok := p.Annotations[n.AnnotationAssignment()]; ok {
			continue
		}
		if d := foreignDomain(n, p.Annotations, "assignment"); d != "" {
			foreign[d] = append(foreign[d], p.Namespace+"/"+p.Name)
		}
	}
	var out []string
	for _, d := range slices.Sorted(maps.Keys(foreign)) {
		out = append(out, fmt.Sprintf("a gpushare assignment under the domain %q (%s/assignment), not under this program's %q, is on %s: the extender that placed them runs with --domain=%s; give every gpushare program the same --domain (the chart's names.domain)",
			d, d, n.domain, objects("pod", foreign[d]), d))
	}
	return out
}

// foreignDomain is the domain of an annotation "<domain>/<name>" other than
// n's whose value looks like a gpushare record (a JSON object with a
// "version"), or "".
func foreignDomain(n Names, annotations map[string]string, name string) string {
	for k, v := range annotations {
		d, rest, ok := strings.Cut(k, "/")
		if !ok || rest != name || d == n.domain {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(v), "{") && strings.Contains(v, `"version"`) {
			return d
		}
	}
	return ""
}

// objects is "nodes a, b" or "node a", with at most maxMismatchObjects names.
func objects(kind string, names []string) string {
	slices.Sort(names)
	s := kind
	if len(names) > 1 {
		s += "s"
	}
	if len(names) > maxMismatchObjects {
		return fmt.Sprintf("%s %s and %d more", s, strings.Join(names[:maxMismatchObjects], ", "), len(names)-maxMismatchObjects)
	}
	return s + " " + strings.Join(names, ", ")
}
