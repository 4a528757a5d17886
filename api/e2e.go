package api

// AnnotationSimulatedContainers, on a Pod, is written only by the end-to-end
// tests' simulated node agent (test/nodeagent), never by a product program:
// what each container would get from the kubelet's device manager at start
// (device IDs, environment, mounts), as the agent's ContainerRecords JSON.
// Tests and people read it to check that a container's mount matches the
// pod's Assignment. It is declared here so that no key is spelled twice.
const AnnotationSimulatedContainers = Prefix + "e2e-containers"
