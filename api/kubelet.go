package api

import (
	"crypto/ed25519"

	corev1 "k8s.io/api/core/v1"
)

// KubeletDemand is a pod's demand for one device-plugin resource as the
// kubelet sees it, whatever the contract says of it: every container (init
// containers, then app containers, in spec order) that names res in its
// limits, else its requests, with the quantity rounded up
// (resource.Quantity.Value), zero and negative included. The kubelet calls
// Allocate for each of them in that order; Names.RequestFromPod is the
// contract's (validated) reading.
//
// Example: an init container with limits {gpu-mem: 2} and an app container
// with requests {gpu-mem: 1.5} give [{init 2} {app 2}].
func KubeletDemand(pod *corev1.Pod, res corev1.ResourceName) []ContainerRequest {
	var out []ContainerRequest
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if q, ok := containerQuantity(c, res); ok {
				out = append(out, ContainerRequest{Name: c.Name, Units: q.Value()})
			}
		}
	}
	return out
}

// TrustedAssignment is the pod's assignment as a program that holds keys
// trusts it: decoded and matched to the pod (AssignmentFromPod), then
// verified by keys (RecordKeys.Verify; the zero RecordKeys accepts every
// record). Every program outside this package reads records through it.
//
// A record these very keys verified before is not checked again: the
// annotation value is the whole record, signature included, and the device
// plugin reads every record of its node at each kubelet call.
func (n Names) TrustedAssignment(pod *corev1.Pod, keys RecordKeys) (Assignment, error) {
	a, err := n.AssignmentFromPod(pod)
	if err != nil || !keys.Enabled() {
		return a, err
	}
	k := trustKey{record: pod.Annotations[n.AnnotationAssignment()], keys: keys.material(a.Node)}
	if _, ok := verifiedRecords.get(k); ok {
		return a, nil
	}
	if err := keys.Verify(a); err != nil {
		return a, err
	}
	verifiedRecords.put(k, struct{}{})
	return a, nil
}

// trustKey is a record's annotation value and the key material that
// verified it (RecordKeys.material).
type trustKey struct {
	record string
	keys   [3 * ed25519.PublicKeySize]byte
}

// verifiedRecords holds the records TrustedAssignment verified.
var verifiedRecords = newMemo[trustKey, struct{}](1 << 14)
