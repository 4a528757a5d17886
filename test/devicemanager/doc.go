// Package devicemanager proves the gpushare device plugin against the REAL
// kubelet device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager,
// used as a library): registration, capacity, allocation for pods through
// GetPreferredAllocation and Allocate, the container options the kubelet
// would give the runtime, a refused bypass pod, a kubelet restart, a plugin
// restart, and same-size pods admitted out of order with the kubelet's own
// PodResources server reconciling the records.
//
// The device manager hard-codes /var/lib/kubelet/device-plugins and wipes it
// on start, so the test re-runs itself in a private mount namespace with a
// tmpfs on /var/lib (root and unshare(1) needed; `make test-devicemanager`).
package devicemanager
