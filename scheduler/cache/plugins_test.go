package cache_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/cache"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
)

// pluginPod is a device plugin pod of the chart's DaemonSet on node.
func pluginPod(name, node string, ready bool) *podtest.Builder {
	return podtest.Make("gpushare-system", name).UID("uid-"+name).Node(node).Phase(corev1.PodRunning).
		Label("app.kubernetes.io/component", "device-plugin").Ready(ready)
}

// Between a device plugin's crash (or its pod's deletion) and its
// successor's registration the kubelet holds the node's GPU devices
// unhealthy and fails every GPU pod it admits. The cache follows the
// plugin's pods: a node whose plugin pods are all not serving fits no GPU
// pod, with a reason that says why and what ends it; its cards stay visible.
func TestNoGPUPodOnANodeWhosePluginIsNotServing(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "device-plugin"})
	c := cache.New(cache.WithDevicePluginSelector(sel))
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	c.SetNode(fixture.MakeNode("never-seen").Card(0, 40).Obj())
	gpu := podtest.Make("ns", "p").UID("uid-p").GPU("main", 4).Obj()
	fits := func(node string) error {
		snap, err := c.NodeSnapshot(node)
		if err != nil {
			t.Fatal(err)
		}
		if snap.InventoryErr != nil {
			if len(snap.Cards) != 1 {
				t.Errorf("node %s: %d cards in the snapshot; want its card kept while the plugin is not serving", node, len(snap.Cards))
			}
			return snap.InventoryErr
		}
		_, err = decideAndAssume(t, c, gpu, node)
		c.Forget(gpu.UID)
		return err
	}
	notServing := func(step, node, want string) {
		t.Helper()
		err := fits(node)
		if !errors.Is(err, api.ErrPluginNotServing) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: node %s: %v; want ErrPluginNotServing saying %q", step, node, err, want)
		}
		if info := c.Inspect(node); len(info) != 1 || info[0].InventoryErrorCode != api.InventoryErrorPluginNotServing {
			t.Errorf("%s: /inspect of %s: %+v; want code %s", step, node, info, api.InventoryErrorPluginNotServing)
		}
	}
	if err := fits("n1"); err != nil {
		t.Errorf("no plugin pod seen yet: %v; want the node judged by its cards alone", err)
	}

	c.SetPod(pluginPod("plugin-a", "n1", false).Obj())
	notServing("plugin starting", "n1", "pod gpushare-system/plugin-a not Ready")
	c.SetPod(pluginPod("plugin-a", "n1", true).Obj())
	if err := fits("n1"); err != nil {
		t.Errorf("plugin Ready: %v; want fits", err)
	}
	// Other pods with other labels change nothing.
	c.SetPod(podtest.Make("ns", "web").UID("uid-web").Node("never-seen").Phase(corev1.PodRunning).Label("app.kubernetes.io/component", "web").Obj())
	if err := fits("never-seen"); err != nil {
		t.Errorf("a pod the selector does not match: %v", err)
	}

	c.SetPod(pluginPod("plugin-a", "n1", false).Obj())
	notServing("plugin crashed (not Ready)", "n1", "plugin-a")
	// A rolling update with surge: the new pod is Ready beside the old.
	c.SetPod(pluginPod("plugin-b", "n1", true).Obj())
	if err := fits("n1"); err != nil {
		t.Errorf("one of two plugin pods Ready: %v; want fits", err)
	}
	c.SetPod(pluginPod("plugin-b", "n1", true).Deleting().Obj())
	notServing("the Ready plugin pod is being deleted", "n1", "plugin-a, gpushare-system/plugin-b")
	c.DeletePod("uid-plugin-a")
	c.DeletePod("uid-plugin-b")
	notServing("every plugin pod gone", "n1", "device plugin pod is gone")
	c.SetPod(pluginPod("plugin-c", "n1", true).Obj())
	if err := fits("n1"); err != nil {
		t.Errorf("the DaemonSet's new pod is Ready: %v; want fits", err)
	}
	// The pod's standby plugin serves while the active one restarts: the pod is not Ready (one
	// container is not), the node's devices stay healthy in the kubelet.
	c.SetPod(pluginPod("plugin-c", "n1", false).ContainerReady("device-plugin", false).ContainerReady("device-plugin-standby", true).Obj())
	if err := fits("n1"); err != nil {
		t.Errorf("the standby container is ready while the active one restarts: %v; want fits", err)
	}
	c.SetPod(pluginPod("plugin-c", "n1", false).ContainerReady("device-plugin", false).ContainerReady("device-plugin-standby", false).Obj())
	notServing("both plugin containers not ready", "n1", "plugin-c")

	// Without a selector plugin pods are ordinary pods.
	off := cache.New()
	off.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	off.SetPod(pluginPod("plugin-a", "n1", false).Obj())
	if snap, _ := off.NodeSnapshot("n1"); snap.InventoryErr != nil {
		t.Errorf("no selector: %v", snap.InventoryErr)
	}
}

// A kubelet that restarts reads its device checkpoint and reports the
// gpu-mem resource with no device (capacity and allocatable 0) until the
// plugin registers with it again, and fails every GPU pod it admits
// meanwhile. The cache places no GPU pod on such a node, with or without
// plugin pods followed, whatever the plugin pod's readiness says (the
// restarted kubelet has not probed it yet); a node whose devices are all
// unhealthy or held whole keeps its capacity and is judged by its cards.
func TestNoGPUPodOnANodeWhoseKubeletRestartedUntilThePluginRegistersAgain(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "device-plugin"})
	gpu := podtest.Make("ns", "p").UID("uid-p").GPU("main", 4).Obj()
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		pluginPod  bool // a Ready plugin pod on the node, followed by the selector
		noEntry    bool // the Node has no gpu-mem capacity entry at all
		notServing bool
	}{
		{name: "restarted kubelet, plugin not registered yet: no GPU pod", node: fixture.MakeNode("n1").Card(0, 40).KubeletDevices(0, 0).Obj(), notServing: true},
		{name: "restarted kubelet while the plugin pod still shows Ready: no GPU pod", node: fixture.MakeNode("n1").Card(0, 40).KubeletDevices(0, 0).Obj(), pluginPod: true, notServing: true},
		{name: "plugin registered with the restarted kubelet: fits", node: fixture.MakeNode("n1").Card(0, 40).KubeletDevices(40, 40).Obj(), pluginPod: true},
		{name: "every device unhealthy or held whole (allocatable 0, capacity kept): judged by its cards", node: fixture.MakeNode("n1").Card(0, 40).KubeletDevices(40, 0).Obj()},
		{name: "kubelet never told of gpu-mem (no capacity entry): judged by its cards", node: fixture.MakeNode("n1").Card(0, 40).Obj(), noEntry: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cache.New(cache.WithDevicePluginSelector(sel))
			if tc.noEntry {
				delete(tc.node.Status.Capacity, api.DefaultNames().ResourceName())
				delete(tc.node.Status.Allocatable, api.DefaultNames().ResourceName())
			}
			c.SetNode(tc.node)
			if tc.pluginPod {
				c.SetPod(pluginPod("plugin-a", "n1", true).Obj())
			}
			snap, err := c.NodeSnapshot("n1")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.notServing {
				if snap.InventoryErr != nil {
					t.Fatalf("InventoryErr %v; want the node judged by its cards", snap.InventoryErr)
				}
				if _, err := decideAndAssume(t, c, gpu, "n1"); err != nil {
					t.Errorf("a 4 GiB pod on a free 40 GiB card: %v; want fits", err)
				}
				return
			}
			if err := snap.InventoryErr; !errors.Is(err, api.ErrPluginNotServing) || !strings.Contains(err.Error(), "kubelet reports no GPU device") || !strings.Contains(err.Error(), "placed here again once") {
				t.Errorf("InventoryErr %v; want ErrPluginNotServing saying the kubelet reports no GPU device and what ends it", err)
			}
			if len(snap.Cards) != 1 {
				t.Errorf("%d cards in the snapshot; want the card kept", len(snap.Cards))
			}
			if info := c.Inspect("n1"); len(info) != 1 || info[0].InventoryErrorCode != api.InventoryErrorPluginNotServing {
				t.Errorf("/inspect: %+v; want code %s", info, api.InventoryErrorPluginNotServing)
			}
			// The plugin registers again: the kubelet's next status lists its devices.
			c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
			if snap, _ := c.NodeSnapshot("n1"); snap.InventoryErr != nil {
				t.Errorf("after the kubelet reports the devices again: %v; want fits", snap.InventoryErr)
			}
		})
	}
}

// A kubelet that dies leaves its Node as it was (capacity kept, the plugin pod Ready) for as long
// as it is down, and the next kubelet fails every GPU pod bound there meanwhile. The plugin says
// so in its inventory (NotServing, written when the kubelet's ListAndWatch stream ends): the cache
// places no GPU pod there, with the plugin's reason, until the plugin's inventory says it serves.
func TestNoGPUPodOnANodeWhosePluginSaysTheKubeletStreamsNoMore(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "device-plugin"})
	gpu := podtest.Make("ns", "p").UID("uid-p").GPU("main", 4).Obj()
	const reason = "the kubelet has no ListAndWatch stream open on its example.com/gpu-mem (the kubelet is down or restarting, or the plugin has not registered with it yet)"
	c := cache.New(cache.WithDevicePluginSelector(sel))
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	c.SetPod(pluginPod("plugin-a", "n1", true).Obj())
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).PluginNotServing(reason).Obj())
	snap, err := c.NodeSnapshot("n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.InventoryErr; !errors.Is(err, api.ErrPluginNotServing) || !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), "placed here again once") {
		t.Errorf("InventoryErr %v; want ErrPluginNotServing with the plugin's reason and what ends it", err)
	}
	if len(snap.Cards) != 1 {
		t.Errorf("%d cards in the snapshot; want the card kept", len(snap.Cards))
	}
	if info := c.Inspect("n1"); len(info) != 1 || info[0].InventoryErrorCode != api.InventoryErrorPluginNotServing {
		t.Errorf("/inspect: %+v; want code %s", info, api.InventoryErrorPluginNotServing)
	}
	// The new kubelet streams from the plugin: its inventory says so.
	c.SetNode(fixture.MakeNode("n1").Card(0, 40).Obj())
	if snap, _ := c.NodeSnapshot("n1"); snap.InventoryErr != nil {
		t.Fatalf("after the plugin serves again: %v; want fits", snap.InventoryErr)
	}
	if _, err := decideAndAssume(t, c, gpu, "n1"); err != nil {
		t.Errorf("a 4 GiB pod on a free 40 GiB card: %v; want fits", err)
	}
}
