package cache

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// WithDevicePluginSelector makes the cache follow the device plugin's own
// pods, the pods sel matches (the chart's DaemonSet pods): a node whose
// plugin pods are all not serving — none Ready (nor any of their containers), or every one being deleted
// or finished, or none left where one ran — fits no GPU pod
// (api.ErrPluginNotServing, on the node's snapshot as its InventoryErr), so
// that no pod is bound there while the kubelet holds the node's GPU devices
// unhealthy: between a plugin's crash and its successor's registration the
// kubelet fails every GPU pod it admits ("no healthy devices present").
// A node where no plugin pod was ever seen is not judged. nil: off.
func WithDevicePluginSelector(sel labels.Selector) Option {
	return func(c *Cache) { c.pluginSel = sel }
}

// pluginPod is one device plugin pod on a node.
type pluginPod struct {
	name    string
	serving bool
}

// serving reports whether a plugin pod serves: Ready, or at least one of its containers ready
// (the chart's pod runs a standby plugin beside the active one, each registered with the
// kubelet on its own socket, and the node's devices stay healthy while either serves: the pod
// is not Ready while one of them restarts), not finished, not being deleted (a deleted plugin
// stops on its own schedule; the kubelet marks the devices unhealthy the moment it does).
func serving(p *corev1.Pod) bool {
	if !api.MayStartContainers(p) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Ready {
			return true
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// trackPluginLocked records pod if it is a device plugin pod bound to a
// node, and publishes the node when whether its plugin serves changed.
// Called with the write lock held.
func (c *Cache) trackPluginLocked(pod *corev1.Pod) {
	if c.pluginSel == nil || pod.Spec.NodeName == "" || !c.pluginSel.Matches(labels.Set(pod.Labels)) {
		return
	}
	n := c.node(pod.Spec.NodeName)
	before := n.pluginErr()
	if n.plugins == nil {
		n.plugins = map[types.UID]pluginPod{}
	}
	n.plugins[pod.UID] = pluginPod{name: pod.Namespace + "/" + pod.Name, serving: serving(pod)}
	c.pluginNodes[pod.UID] = n.name
	c.publishPluginChange(n, before)
}

// untrackPluginLocked forgets a deleted device plugin pod. Called with the
// write lock held.
func (c *Cache) untrackPluginLocked(uid types.UID) {
	name, ok := c.pluginNodes[uid]
	if !ok {
		return
	}
	delete(c.pluginNodes, uid)
	n, ok := c.nodes[name]
	if !ok {
		return
	}
	before := n.pluginErr()
	delete(n.plugins, uid)
	c.publishPluginChange(n, before)
	c.gc(n)
}

func (c *Cache) publishPluginChange(n *nodeState, before error) {
	if logPluginChange(n, before) {
		c.publish(n)
	}
}

// logPluginChange logs and reports whether n's pluginErr changed from before.
func logPluginChange(n *nodeState, before error) bool {
	after := n.pluginErr()
	if (before == nil) == (after == nil) && (before == nil || before.Error() == after.Error()) {
		return false
	}
	if after != nil {
		klog.InfoS("Placing no GPU pods on the node until its device plugin serves", "node", n.name, "reason", after)
	} else {
		klog.InfoS("The node's device plugin serves again", "node", n.name)
	}
	return true
}

// kubeletBare reports whether the node's kubelet knows res but no device of it: the Node's
// capacity of res is 0. The kubelet's device manager reads its checkpoint when it starts and
// reports every resource there with no device "till the corresponding device plugin
// re-registers" (devicemanager.readCheckpoint: capacity and allocatable 0), and reports 0 too for
// a resource whose plugin has been gone past its grace period (GetCapacity's deleted resources).
// Either way it fails every pod it admits that asks for res. Cards that are unhealthy or held
// whole keep their devices in the capacity (allocatable drops, capacity does not), so 0 means no
// plugin has listed its devices to this kubelet, never that they are busy.
func kubeletBare(node *corev1.Node, res corev1.ResourceName) bool {
	q, ok := node.Status.Capacity[res]
	return ok && q.IsZero()
}

// pluginErr says why the node's device plugin is not serving: its inventory says the kubelet
// streams from it no longer (api.Inventory.NotServing: the kubelet is down), its kubelet offers
// none of its devices (kubeletBare: restarted, the plugin not registered again), or, with
// WithDevicePluginSelector, no plugin pod of the node serves; nil when it
// serves or, for the pods, no plugin pod was ever seen on the node.
func (n *nodeState) pluginErr() error {
	if n.notServing != "" {
		return fmt.Errorf("node %s: %w: its device plugin reports that %s; GPU pods are placed here again once the kubelet streams from the plugin (if the kubelet is up and this stays: kubectl logs on the node's device plugin pod)", n.name, api.ErrPluginNotServing, n.notServing)
	}
	if n.kubeletBare {
		return fmt.Errorf("node %s: %w: its kubelet reports no GPU device (capacity 0: the kubelet restarted and the plugin has not registered with it again); GPU pods are placed here again once the kubelet reports the plugin's devices (if it stays at 0: kubectl logs on the node's device plugin pod)", n.name, api.ErrPluginNotServing)
	}
	if n.plugins == nil {
		return nil
	}
	var names []string
	for _, p := range n.plugins {
		if p.serving {
			return nil
		}
		names = append(names, p.name)
	}
	if len(names) == 0 {
		return fmt.Errorf("node %s: %w: its device plugin pod is gone; GPU pods are placed here again once the DaemonSet's new pod is Ready", n.name, api.ErrPluginNotServing)
	}
	sort.Strings(names)
	return fmt.Errorf("node %s: %w: pod %s not Ready (starting, restarting or stopping); GPU pods are placed here again once it is Ready (if it stays not Ready: kubectl logs on it)", n.name, api.ErrPluginNotServing, strings.Join(names, ", "))
}
