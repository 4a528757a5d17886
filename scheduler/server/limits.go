package server

import (
	"fmt"

	"github.com/gpushare/gpushare/api"
)

// MaxGPUContainers is the most app containers asking for api.Names.ResourceName or
// api.Names.WholeResourceName that the extender places in one pod. A pod with more fails filter on every
// node, unresolvably (preemption cannot help), and bind refuses it, with a
// message that says to split it (errTooManyContainers).
//
// Why 128: Kubernetes sets no limit on containers per pod, but real pods
// have one or a few app containers plus sidecars (a service mesh, a log
// shipper, an exporter: a handful, a few dozen at the very most), and all of
// a pod's containers share one node, where the kubelet's default is 110 pods
// in all. 128 is above all of that, so no real pod meets it, while it keeps
// one node's decision small: ordering and placing 128 containers costs
// microseconds per node, where a 16,384-container pod (about what fits in
// the API server's 1.5 MiB object limit) cost a quarter of a second per
// node before the ordering was n log n, and still costs milliseconds.
const MaxGPUContainers = 128

// errTooManyContainers refuses a pod with more than MaxGPUContainers
// requesting containers, or returns nil.
func errTooManyContainers(names api.Names, req api.PodRequest) error {
	if n := len(req.Containers) + len(req.WholeCards); n > MaxGPUContainers {
		what := string(names.ResourceName())
		if len(req.WholeCards) > 0 {
			what += " or " + string(names.WholeResourceName())
		}
		return fmt.Errorf("%w: %d containers ask for %s, the gpushare extender places at most %d per pod: split the work over several pods (e.g. more replicas)",
			api.ErrInvalidRequest, n, what, MaxGPUContainers)
	}
	return nil
}

// DefaultMaxBodyBytes bounds a request body by default: 4 MiB. The largest
// call kube-scheduler makes with nodeCacheCapable: true (the shipped
// configuration) is a filter or prioritize with the pod and every node's
// name. A pod is at most ~1.5 MiB (etcd's request limit); 5,000 node names
// of the longest legal length (253 characters, quoted, comma) are 1.28 MB:
// 2.8 MB together, so 4 MiB leaves room. Bodies are decoded as they stream,
// and a larger one is refused with 413 after 4 MiB is read, so one call
// holds at most that much. With nodeCacheCapable: false (full Node objects,
// 5–15 KB each) raise it (--max-request-bytes).
const DefaultMaxBodyBytes = 4 << 20
