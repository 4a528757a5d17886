#!/usr/bin/env bash
# Smoke test of kubectl-inspect-gpushare against a real kube-apiserver.
#
# Starts a private control plane with hack/cluster.sh (its own state dir and
# ports, no kube-scheduler), writes GPU nodes and gpushare pods by hand in the
# formats of docs/protocol.md (an unhealthy card, a pending assignment, a
# cordoned node, a node with capacity but no inventory, a pod carrying a copy
# of another pod's assignment), runs the real binary in its views, checks
# the exit codes, and stops every process it started.
#
# Usage: inspector/hack/smoke.sh            (needs hack/build-k8s.sh's binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."

export GPUSHARE_STATE="${GPUSHARE_STATE:-/tmp/gpushare-inspector-smoke}"
export GPUSHARE_ETCD_PORT=33790 GPUSHARE_ETCD_PEER_PORT=33800 GPUSHARE_APISERVER_PORT=26443
export GPUSHARE_KCM_PORT=30257 GPUSHARE_SCHEDULER_PORT=30259 GPUSHARE_SCHEDULER=0
export GPUSHARE_KCM_CONTROLLERS='*,-node-lifecycle-controller'   # no kubelets: keep pods where they are
K="${GPUSHARE_K8S_BIN:-${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-${K8S_VERSION:-$(cat "$(dirname "$0")/../../hack/k8s-version")}/bin}/kubectl"
TMP="$(mktemp -d)"
BIN="$TMP/kubectl-inspect-gpushare"

cleanup() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then tail -n 20 "$GPUSHARE_STATE"/logs/*.log 2>/dev/null || true; fi
	hack/cluster.sh down --clean >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT
go build -o "$BIN" ./inspector
hack/cluster.sh up
export KUBECONFIG="$GPUSHARE_STATE/kubeconfig"

inv() { # unit cards-json
  echo "{\"version\":1,\"unit\":\"$1\",\"cards\":$2}"; }
mknode() { # name ip capacity allocatable
  $K apply -f - <<Y >/dev/null
apiVersion: v1
kind: Node
metadata: {name: $1, labels: {gpushare: "true"}}
Y
  $K patch node "$1" --subresource=status --type=merge -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$2\"}],\"capacity\":{\"example.com/gpu-mem\":\"$3\",\"cpu\":\"8\",\"memory\":\"32Gi\",\"pods\":\"110\"},\"allocatable\":{\"example.com/gpu-mem\":\"$4\",\"cpu\":\"8\",\"memory\":\"32Gi\",\"pods\":\"110\"}}}" >/dev/null
}
A100='"model":"NVIDIA A100-SXM4-40GB","memoryMiB":40960,"units":40'
mknode gpu-node-1 192.168.10.11 80 40
$K annotate --overwrite node gpu-node-1 gpushare.example.com/inventory="$(inv GiB "[{\"index\":0,\"uuid\":\"GPU-1b6a0c2e\",$A100,\"state\":\"healthy\"},{\"index\":1,\"uuid\":\"GPU-77c0d4f1\",$A100,\"state\":\"unhealthy\",\"reason\":\"XID 79\"}]")" >/dev/null
mknode gpu-node-2 192.168.10.12 79 79
$K annotate --overwrite node gpu-node-2 gpushare.example.com/inventory="$(inv GiB '[{"index":0,"uuid":"GPU-5e1c9a33","model":"NVIDIA H100 80GB HBM3","memoryMiB":81559,"units":79,"state":"healthy"}]')" >/dev/null
$K cordon gpu-node-2 >/dev/null
mknode gpu-node-3 192.168.10.13 40 40   # capacity, but no inventory
pod() { # name node units
  $K apply -f - <<Y >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  nodeName: $2
  automountServiceAccountToken: false
  containers:
  - name: main
    image: busybox
    resources: {limits: {example.com/gpu-mem: "$3"}}
Y
}
assign() { # pod node uuid index units phase
  uid=$($K get pod "$1" -o jsonpath='{.metadata.uid}')
  $K annotate --overwrite pod "$1" gpushare.example.com/assignment="{\"version\":1,\"podUID\":\"$uid\",\"node\":\"$2\",\"unit\":\"GiB\",\"phase\":\"$6\",\"containers\":[{\"name\":\"main\",\"cardUUID\":\"$3\",\"cardIndex\":$4,\"units\":$5}]}" >/dev/null
}
until $K get sa default >/dev/null 2>&1; do sleep 1; done
pod train-a gpu-node-1 20; assign train-a gpu-node-1 GPU-1b6a0c2e 0 20 Allocated
pod train-b gpu-node-1 10; assign train-b gpu-node-1 GPU-1b6a0c2e 0 10 Assigned
pod eval gpu-node-1 8;     assign eval gpu-node-1 GPU-77c0d4f1 1 8 Allocated
pod llm gpu-node-2 60;     assign llm gpu-node-2 GPU-5e1c9a33 0 60 Allocated
pod sneaky gpu-node-2 5
$K annotate --overwrite pod sneaky gpushare.example.com/assignment="$($K get pod train-a -o jsonpath='{.metadata.annotations.gpushare\.example\.com/assignment}')" >/dev/null

run() { echo "\$ kubectl inspect gpushare${*:+ $*}"; "$BIN" "$@"; echo; }
run
run gpu-node-1 -d
echo "\$ kubectl inspect gpushare -o json"
"$BIN" -o json | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v["totals"][0]["allocated"] == 98, v["totals"]; print("json totals:", v["totals"])'
if "$BIN" no-such-node 2>/dev/null; then echo "FAIL: unknown node exited 0"; exit 1; fi
echo "unknown node: exit $("$BIN" no-such-node >/dev/null 2>&1; echo $?) (want 1)"
echo "smoke: ok"
