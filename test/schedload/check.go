package schedload

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/api"
)

// Report is what the checks after a burst found.
type Report struct {
	// Pods in the namespace, Bound of them bound to a node, Recorded of
	// them with a valid assignment record.
	Pods, Bound, Recorded int
	// CardsUsed is how many cards hold at least one pod; FullCards how many
	// are filled to capacity.
	CardsUsed, FullCards int
	// Problems lists what is wrong (empty: all good), at most MaxProblems,
	// then a count of the rest.
	Problems []string
}

// OK reports whether the checks found nothing wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// MaxProblems bounds the problems a Report lists one by one.
const MaxProblems = 20

// problems collects problem lines, keeping the first MaxProblems.
type problems struct {
	lines []string
	more  int
}

func (p *problems) add(format string, args ...any) {
	if len(p.lines) < MaxProblems {
		p.lines = append(p.lines, fmt.Sprintf(format, args...))
		return
	}
	p.more++
}

func (p *problems) list() []string {
	if p.more > 0 {
		return append(p.lines, fmt.Sprintf("… and %d more", p.more))
	}
	return p.lines
}

// CheckAssignments checks a burst scheduled by the gpushare extender: every
// pod of the namespace is bound and carries a valid assignment record
// (api.Names.AssignmentFromPod: it decodes, validates, names the pod's UID, the node
// it is bound to and the units each container asks), every card it names is
// in that node's inventory under that index, and per card the units of all
// records (of every namespace: other pods may share the cards) are at most the
// card's units.
func CheckAssignments(ctx context.Context, client kubernetes.Interface, ns string) (Report, error) {
	pods, nodes, err := list(ctx, client, ns)
	if err != nil {
		return Report{}, err
	}
	var all *corev1.PodList
	err = wait.PollUntilContextTimeout(ctx, time.Second, listTimeout, true, func(ctx context.Context) (bool, error) {
		all, err = client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil, nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("list every pod: %w", err)
	}
	return checkAssignments(pods, all.Items, nodes), nil
}

func checkAssignments(pods, everyPod []corev1.Pod, nodes map[string]*corev1.Node) Report {
	var p problems
	r := Report{Pods: len(pods)}
	unbound := 0
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName == "" {
			unbound++
			continue
		}
		r.Bound++
		asg, err := api.DefaultNames().AssignmentFromPod(pod)
		if err != nil {
			p.add("pod %s on %s: %v", pod.Name, pod.Spec.NodeName, err)
			continue
		}
		if cardErr := cardsInInventory(asg, nodes[pod.Spec.NodeName]); cardErr != "" {
			p.add("pod %s: %s", pod.Name, cardErr)
			continue
		}
		r.Recorded++
	}
	if unbound > 0 {
		p.add("%d of %d pods not bound", unbound, len(pods))
	}
	// Capacity, over every record in the cluster.
	type cardKey struct{ node, uuid string }
	used := map[cardKey]int64{}
	holders := map[cardKey][]string{}
	for i := range everyPod {
		pod := &everyPod[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		asg, err := api.DefaultNames().AssignmentFromPod(pod)
		if err != nil {
			continue
		}
		for _, c := range asg.Containers {
			k := cardKey{asg.Node, c.CardUUID}
			used[k] += c.Units
			holders[k] = append(holders[k], fmt.Sprintf("%s/%s:%d", pod.Namespace, pod.Name, c.Units))
		}
	}
	keys := make([]cardKey, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].node+keys[i].uuid < keys[j].node+keys[j].uuid })
	for _, k := range keys {
		inv, err := api.DefaultNames().InventoryFromNode(nodes[k.node])
		if err != nil {
			continue // reported above for the namespace's pods
		}
		card, ok := inv.CardByUUID(k.uuid)
		if !ok {
			continue
		}
		r.CardsUsed++
		switch {
		case used[k] > card.Units:
			p.add("card %s of node %s over capacity: %d of %d units assigned (%v)", k.uuid, k.node, used[k], card.Units, holders[k])
		case used[k] == card.Units:
			r.FullCards++
		}
	}
	r.Problems = p.list()
	return r
}

// cardsInInventory says what is wrong with the cards a record names, given
// the node's inventory ("" when nothing).
func cardsInInventory(asg api.Assignment, node *corev1.Node) string {
	if node == nil {
		return fmt.Sprintf("bound to node %s, which does not exist", asg.Node)
	}
	inv, err := api.DefaultNames().InventoryFromNode(node)
	if err != nil {
		return err.Error()
	}
	for _, c := range asg.Containers {
		card, ok := inv.CardByUUID(c.CardUUID)
		switch {
		case !ok:
			return fmt.Sprintf("container %s assigned card %s, not in node %s's inventory", c.Name, c.CardUUID, node.Name)
		case card.Index != c.CardIndex:
			return fmt.Sprintf("container %s assigned card %s as index %d, the inventory says %d", c.Name, c.CardUUID, c.CardIndex, card.Index)
		case asg.Unit != inv.Unit:
			return fmt.Sprintf("record in %s, node %s's inventory in %s", asg.Unit, node.Name, inv.Unit)
		}
	}
	return ""
}

// CheckBound checks a burst scheduled by a plain kube-scheduler (no
// extender, no records): every pod of the namespace is bound, and per node
// the gpu-mem the bound pods ask is at most the node's allocatable.
func CheckBound(ctx context.Context, client kubernetes.Interface, ns string) (Report, error) {
	pods, nodes, err := list(ctx, client, ns)
	if err != nil {
		return Report{}, err
	}
	return checkBound(pods, nodes), nil
}

func checkBound(pods []corev1.Pod, nodes map[string]*corev1.Node) Report {
	var p problems
	r := Report{Pods: len(pods)}
	asked := map[string]int64{}
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		r.Bound++
		req, err := api.DefaultNames().RequestFromPod(pod)
		if err != nil {
			p.add("pod %s: %v", pod.Name, err)
			continue
		}
		asked[pod.Spec.NodeName] += req.Total()
	}
	if r.Bound < r.Pods {
		p.add("%d of %d pods not bound", r.Pods-r.Bound, r.Pods)
	}
	names := make([]string, 0, len(asked))
	for n := range asked {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		node := nodes[n]
		if node == nil {
			p.add("pods bound to node %s, which does not exist", n)
			continue
		}
		alloc := node.Status.Allocatable[api.DefaultNames().ResourceName()]
		if asked[n] > alloc.Value() {
			p.add("node %s over its allocatable %s: %d asked, %d allocatable", n, api.DefaultNames().ResourceName(), asked[n], alloc.Value())
		}
	}
	r.Problems = p.list()
	return r
}

// list returns the namespace's pods and every node by name. It reads the API
// server's watch cache (resourceVersion "0"): a consistent list waits for
// the cache to catch up with etcd, which on an overloaded server (a stalled
// burst) can exceed the request timeout; the cache is at least as fresh as
// the bind events the caller has already seen through its informer. Errors
// are retried for up to listTimeout.
func list(ctx context.Context, client kubernetes.Interface, ns string) ([]corev1.Pod, map[string]*corev1.Node, error) {
	var pods *corev1.PodList
	var nl *corev1.NodeList
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, listTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
			lastErr = fmt.Errorf("list pods of %s: %w", ns, err)
			return false, nil
		}
		if nl, err = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
			lastErr = fmt.Errorf("list nodes: %w", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (still after %v: %w)", lastErr, listTimeout, err)
	}
	nodes := make(map[string]*corev1.Node, len(nl.Items))
	for i := range nl.Items {
		nodes[nl.Items[i].Name] = &nl.Items[i]
	}
	return pods.Items, nodes, nil
}

// listTimeout bounds the checks' retries of their lists.
const listTimeout = 3 * time.Minute
