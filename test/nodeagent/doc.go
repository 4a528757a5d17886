// Package nodeagent is a simulated kubelet for one Node in the end-to-end
// tests: it drives the real kubelet device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) against gpushare's device
// plugin, keeps its Node Ready, and admits the pods bound to it.
package nodeagent
