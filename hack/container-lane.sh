#!/usr/bin/env bash
# Installs and builds what the e2e suite's container lane needs (docs/e2e.md):
#   containerd, ctr and runc   Debian's packages (apt-get, root), when missing
#   CNI plugins, iptables      Debian's containernetworking-plugins and iptables (the install
#                              lane's pod network and kube-proxy), when missing
#   kubelet, kube-proxy        hack/build-k8s.sh kubelet kube-proxy (Go module proxy, cached)
#   nvidia-container-runtime,  github.com/NVIDIA/nvidia-container-toolkit (Go module
#   nvidia-ctk                 proxy) into ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/
#                              nvidia-container-toolkit-VERSION/bin, cached
#   containerd 2, its runc     with LANE_CONTAINERD2=1 (the DRA lane, make e2e-dra-lane):
#   shim and ctr               github.com/containerd/containerd/v2 (Go module proxy) into
#                              ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/containerd-VERSION/bin,
#                              cached
# Anything already there is skipped, so the second run costs nothing.
#
# Env: GPUSHARE_CACHE, NVIDIA_TOOLKIT_VERSION (default v1.20.1: v1.17.8, the
#      oldest on the proxy, ignores /var/run/nvidia-container-devices/<id> mounts
#      in CDI mode), LANE_CONTAINERD2, CONTAINERD2_VERSION (default v2.4.2), GO.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLKIT_VERSION="${NVIDIA_TOOLKIT_VERSION:-v1.20.1}"
GO="${GO:-go}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
TOOLKIT_BIN="${CACHE}/nvidia-container-toolkit-${TOOLKIT_VERSION}/bin"
CONTAINERD2_VERSION="${CONTAINERD2_VERSION:-v2.4.2}"
CONTAINERD2_BIN="${CACHE}/containerd-${CONTAINERD2_VERSION}/bin"

log() { printf '%s container-lane: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/sbin/$1" ]]; }

# 1. containerd + runc from Debian (containerd 1.6.20 and runc 1.1.5 on bookworm:
#    containerd 1.6 serves the CRI v1 API kubelet 1.34 speaks).
missing=()
for b in containerd containerd-shim-runc-v2 ctr runc; do
	have "$b" || missing+=("$b")
done
have iptables || missing+=(iptables)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=(cni-plugins)
if [[ ${#missing[@]} -gt 0 ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		log "${missing[*]} missing and not root: install Debian's containerd, runc, iptables and containernetworking-plugins packages"
		exit 1
	fi
	log "installing containerd, runc, iptables, containernetworking-plugins (missing: ${missing[*]})"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd runc iptables containernetworking-plugins >/dev/null
fi
log "$(containerd --version); $(runc --version | head -1)"

# 2. kubelet and kube-proxy, like the control plane, from k8s.io/kubernetes.
# LANE_K8S_BINARIES: make e2e-oldest needs no kube-proxy (the install lane runs on the current version).
hack/build-k8s.sh ${LANE_K8S_BINARIES:-kubelet kube-proxy}

# 3. NVIDIA container toolkit: the runtime (CDI mode) and nvidia-ctk.
mkdir -p "$TOOLKIT_BIN"
for b in nvidia-container-runtime nvidia-ctk; do
	if [[ -x "$TOOLKIT_BIN/$b" ]]; then
		log "$b: present in $TOOLKIT_BIN, skipped"
		continue
	fi
	start=$(date +%s)
	log "$b: building ${TOOLKIT_VERSION}"
	# go-nvml's cgo prologue warns about every deprecated NVML call: silenced.
	GOBIN="$TOOLKIT_BIN" CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" "$GO" install -trimpath \
		-ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${TOOLKIT_VERSION#v}" \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/${b}@${TOOLKIT_VERSION}"
	log "$b: built in $(($(date +%s) - start)) s -> $TOOLKIT_BIN/$b"
done

# 4. containerd 2 for the DRA lane: containerd 1.6 ignores the CDI devices the
#    kubelet names for DRA claims (the CRI's CDIDevices field). Static builds
#    (no cgo: the btrfs snapshotter, the one cgo user, is left out with the
#    other snapshotters the lane does not use), the shim without gRPC as
#    containerd's own Makefile builds it.
if [[ "${LANE_CONTAINERD2:-0}" == 1 ]]; then
	mkdir -p "$CONTAINERD2_BIN"
	pkg=github.com/containerd/containerd/v2
	ldflags="-s -w -X ${pkg}/version.Version=${CONTAINERD2_VERSION}"
	for b in containerd ctr containerd-shim-runc-v2; do
		if [[ -x "$CONTAINERD2_BIN/$b" ]]; then
			log "$b: present in $CONTAINERD2_BIN, skipped"
			continue
		fi
		tags="no_btrfs no_devmapper no_zfs no_tracing urfave_cli_no_docs"
		[[ $b == containerd-shim-runc-v2 ]] && tags="no_grpc urfave_cli_no_docs"
		start=$(date +%s)
		log "$b: building ${CONTAINERD2_VERSION}"
		GOBIN="$CONTAINERD2_BIN" CGO_ENABLED=0 "$GO" install -trimpath -tags "$tags" -ldflags "$ldflags" \
			"${pkg}/cmd/${b}@${CONTAINERD2_VERSION}"
		log "$b: built in $(($(date +%s) - start)) s -> $CONTAINERD2_BIN/$b"
	done
	log "$("$CONTAINERD2_BIN/containerd" --version)"
fi
log "done"
