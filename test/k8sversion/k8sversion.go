// Package k8sversion names the Kubernetes version the e2e tooling runs: the
// control plane, the kubelet and the simulated nodes' reported version.
package k8sversion

import "os"

// Default is the version the tooling runs unless K8S_VERSION names another:
// hack/k8s-version, and the test module's k8s.io/kubernetes (a test checks
// both).
const Default = "v1.37.2"

// Current is this run's version: $K8S_VERSION (`make e2e
// K8S_VERSION=v1.35.4`), else Default.
func Current() string {
	if v := os.Getenv("K8S_VERSION"); v != "" {
		return v
	}
	return Default
}
