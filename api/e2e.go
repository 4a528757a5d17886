package api

// AnnotationSimulatedContainers, on a Pod, is written only by the end-to-end
// tests' simulated node agent (test/nodeagent), never by a product program:
// what each container would get from the kubelet's device manager at start
// (device IDs, environment, mounts), as the agent's ContainerRecords JSON.
// Tests and people read it to check that a container's mount matches the
// pod's Assignment. It is declared here so that no key is spelled twice.
const AnnotationSimulatedContainers = Prefix + "e2e-containers"

// AnnotationSimulatedGPUUse, on a Pod, is read only by the end-to-end tests'
// node agent: the GPU memory each container's process "uses", as
// "container=MiB[@cardIndex],..." (e.g. "c0=6144"). For each entry the agent
// runs a real process in a cgroup named like the kubelet's and lists it, with
// that memory, in the simulated NVML's process file (--nvml-sim-processes),
// on the container's card, or on cardIndex for a container without one.
const AnnotationSimulatedGPUUse = Prefix + "e2e-gpu-use"
