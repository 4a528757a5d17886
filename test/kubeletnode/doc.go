// Package kubeletnode runs one real Kubernetes node for the end-to-end
// suite's container lane: containerd (runc, optionally through NVIDIA's
// container runtime in CDI mode), the real kubelet and gpushare's device
// plugin, each supervised and restarted when it exits, all in a private mount
// namespace with their state under one directory. It creates what the NVIDIA
// runtime needs to decide which cards a container gets — one device node per
// simulated card (mknod, named by the card's UUID), a CDI spec describing
// them and the runtime's config.toml — and, when it stops, removes every
// container, shim, cgroup and mount it made. See docs/e2e.md.
package kubeletnode
