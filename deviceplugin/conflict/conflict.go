// Package conflict decides whether the device plugin may run on a node where
// another GPU device plugin may already be: two plugins handing out the same
// cards would each think it owns them (two pods on one card, each believing
// it has the card's memory). The decision is a pure function of the Node
// (Check); deviceplugin/app acts on it: it does not register, says why in an
// Event on the Node and in its log, and waits for the other plugin to go.
package conflict

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// Reason is the reason of the Warning Event on the Node when the plugin does
// not register because another GPU device plugin is there.
const Reason = "OtherGPUDevicePlugin"

// OtherPlugin is a resource another GPU device plugin advertises, and which
// plugin that is.
type OtherPlugin struct {
	Resource corev1.ResourceName
	Plugin   string
}

// Known are the resources of the GPU device plugins this plugin refuses to
// share a node with.
var Known = []OtherPlugin{
	{"nvidia.com/gpu", "NVIDIA's device plugin (k8s-device-plugin, GPU Operator)"},
	{api.AlibabaResourceName, "Alibaba's gpushare device plugin"},
	{"aliyun.com/gpu-count", "Alibaba's gpushare device plugin"},
	{"nvidia.com/gpumem", "HAMi's device plugin"},
	{"nvidia.com/gpucores", "HAMi's device plugin"},
}

// Finding is one resource of another plugin found on the node.
type Finding struct {
	OtherPlugin
	// Capacity is the node's capacity of the resource.
	Capacity string
}

// Check returns the other plugins' resources the node advertises: a Known
// resource in the node's capacity with a quantity above zero that is not one
// of names' own (with --resource-name=aliyun.com/gpu-mem that name is this
// plugin's). A resource the kubelet still lists at 0 (its plugin gone) does
// not count. Empty: the node is free for this plugin.
func Check(node *corev1.Node, names api.Names) []Finding {
	if node == nil {
		return nil
	}
	var out []Finding
	for _, k := range Known {
		if k.Resource == names.ResourceName() || k.Resource == names.WholeResourceName() {
			continue
		}
		q, ok := node.Status.Capacity[k.Resource]
		if !ok || q.Sign() <= 0 {
			continue
		}
		out = append(out, Finding{OtherPlugin: k, Capacity: q.String()})
	}
	return out
}

// Message says why the plugin does not register on node and what to do, for
// the Event and the log.
func Message(node string, found []Finding) string {
	var parts, plugins []string
	for _, f := range found {
		parts = append(parts, fmt.Sprintf("%s=%s", f.Resource, f.Capacity))
		if !slices.Contains(plugins, f.Plugin) {
			plugins = append(plugins, f.Plugin)
		}
	}
	return fmt.Sprintf("gpushare's device plugin does not register on node %s: another GPU device plugin already advertises its GPUs (%s: %s), and two plugins would hand out the same cards. Remove that plugin from the node (docs/install.md; from Alibaba's gpushare: docs/migration.md), or keep gpushare off it (remove the node's gpushare=true label); gpushare registers once the node no longer advertises those resources",
		node, strings.Join(plugins, ", "), strings.Join(parts, ", "))
}
