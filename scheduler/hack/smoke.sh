#!/usr/bin/env bash
# Smoke test of gpushare-scheduler with the real kube-scheduler (v1.34.4)
# and kube-apiserver: the wire format of the extender verbs, the shipped
# KubeSchedulerConfiguration, binpack's node choice, the reasons a pod that
# fits nowhere shows, release on delete, a restart that loses nothing, and a
# burst of pods that never over-commits a card.
#
# Starts a private control plane with hack/cluster.sh (own state dir and
# ports), the extender on 127.0.0.1:29997, writes GPU nodes by hand in the
# inventory format of docs/protocol.md (no device plugin, no kubelet: pods
# are bound, never run), and stops every process it started.
#
# Usage: scheduler/hack/smoke.sh            (needs hack/build-k8s.sh's binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."

export GPUSHARE_STATE="${GPUSHARE_STATE:-/tmp/gpushare-scheduler-smoke}"
export GPUSHARE_ETCD_PORT=25790 GPUSHARE_ETCD_PEER_PORT=25800 GPUSHARE_APISERVER_PORT=18443
export GPUSHARE_KCM_PORT=22257 GPUSHARE_SCHEDULER_PORT=22259
export GPUSHARE_KCM_CONTROLLERS='*,-node-lifecycle-controller' # no kubelets: keep nodes untainted
EXT=127.0.0.1:29997  # ports below the ephemeral range (32768+)
K="${GPUSHARE_K8S_BIN:-${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-${K8S_VERSION:-$(cat "$(dirname "$0")/../../hack/k8s-version")}/bin}/kubectl"
TMP="$(mktemp -d)"
EXT_PID=""

start_extender() {
	"$TMP/gpushare-scheduler" --kubeconfig "$GPUSHARE_STATE/kubeconfig" --listen "$EXT" -v 2 >>"$TMP/extender.log" 2>&1 &
	EXT_PID=$!
	for _ in $(seq 1 100); do curl -sf "http://$EXT/readyz" >/dev/null && return 0; sleep 0.1; done
	echo "FAIL: extender not ready"; exit 1
}
stop_extender() { [ -z "$EXT_PID" ] || { kill "$EXT_PID" 2>/dev/null || true; wait "$EXT_PID" 2>/dev/null || true; EXT_PID=""; }; }
cleanup() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then tail -n 20 "$TMP/extender.log" "$GPUSHARE_STATE"/logs/kube-scheduler.log 2>/dev/null || true; fi
	stop_extender
	hack/cluster.sh down --clean >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

go build -o "$TMP/gpushare-scheduler" ./scheduler
hack/cluster.sh up --scheduler-config scheduler/config/kube-scheduler-config.yaml --extender-url "http://$EXT"
export KUBECONFIG="$GPUSHARE_STATE/kubeconfig"
start_extender

mknode() { # name total cards-json
	$K apply -f - >/dev/null <<Y
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    gpushare.example.com/inventory: '{"version":1,"unit":"GiB","cards":$3}'
Y
	$K patch node "$1" --subresource=status --type=merge -p "{\"status\":{\"capacity\":{\"example.com/gpu-mem\":\"$2\",\"cpu\":\"32\",\"memory\":\"128Gi\",\"pods\":\"110\"},\"allocatable\":{\"example.com/gpu-mem\":\"$2\",\"cpu\":\"32\",\"memory\":\"128Gi\",\"pods\":\"110\"}}}" >/dev/null
	$K patch node "$1" --type=merge -p '{"spec":{"taints":null}}' >/dev/null
}
card() { echo "{\"index\":$1,\"uuid\":\"GPU-$2-$1\",\"model\":\"A100\",\"memoryMiB\":$(($3 * 1024)),\"units\":$3,\"state\":\"healthy\"}"; }
mknode n1 64 "[$(card 0 n1 32),$(card 1 n1 32)]"
mknode n2 80 "[$(card 0 n2 80)]"
mknode n3 16 "[$(card 0 n3 16)]"
mknode n4 64 "[$(card 0 n4 16),$(card 1 n4 16),$(card 2 n4 16),$(card 3 n4 16)]"

pod() { # name units...
	local name=$1; shift
	local ctrs="" i=0
	for u in "$@"; do ctrs="$ctrs{\"name\":\"c$i\",\"image\":\"x\",\"resources\":{\"limits\":{\"example.com/gpu-mem\":\"$u\"}}},"; i=$((i + 1)); done
	echo "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$name\",\"namespace\":\"default\"},\"spec\":{\"schedulerName\":\"gpushare-scheduler\",\"automountServiceAccountToken\":false,\"containers\":[${ctrs%,}]}}" | $K create -f - >/dev/null
}
node_of() { $K get pod "$1" -o jsonpath='{.spec.nodeName}'; }
wait_bound() { for _ in $(seq 1 100); do [ -n "$(node_of "$1")" ] && return 0; sleep 0.2; done; fail "pod $1 not bound"; }
until $K get sa default >/dev/null 2>&1; do sleep 0.5; done

# binpack (node = most allocated after placement): a (30) goes to n1 (30/64
# beats 30/80 on n2; n3 and n4 have no card that large); b (10+20) joins it
# (60/64); c (24) no longer fits on n1 (2 + 2 free) and goes to n2.
pod a 30; wait_bound a
pod b 10 20; wait_bound b
pod c 24; wait_bound c
echo "a -> $(node_of a), b -> $(node_of b), c -> $(node_of c)"
[ "$(node_of a),$(node_of b),$(node_of c)" = "n1,n1,n2" ] || fail "binpack placed a, b, c on $(node_of a), $(node_of b), $(node_of c); want n1, n1, n2"

# d (60) fits nowhere: kube-scheduler's own filter rejects n1, n2 (56 left)
# and n3 on their totals; n4 has 64 units but no card over 16, which only the
# extender sees: its reason reaches the pod's events.
pod d 60
for _ in $(seq 1 50); do
	msg=$($K get pod d -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
	[ -n "$msg" ] && break; sleep 0.2
done
echo "d: $msg"
case "$msg" in *"more than any card holds"*) ;; *) fail "d's message does not give the extender's reason" ;; esac

# A restart rebuilds the same view from the assignments.
curl -sf "http://$EXT/inspect" >"$TMP/before.json"
stop_extender; start_extender
curl -sf "http://$EXT/inspect" >"$TMP/after.json"
cmp -s "$TMP/before.json" "$TMP/after.json" || fail "/inspect differs after a restart"
echo "restart: /inspect identical"

# Deleting c frees its units: d (60) then fits on n2.
$K delete pod c --grace-period=0 --force >/dev/null 2>&1
wait_bound d
[ "$(node_of d)" = n2 ] || fail "d on $(node_of d), want n2"
echo "after deleting c: d -> $(node_of d)"

# A burst of 24 pods of 7 GiB: no card may exceed its capacity.
pids=()
for i in $(seq -w 1 24); do pod "burst-$i" 7 & pids+=($!); done
wait "${pids[@]}" # not a bare wait: the extender is a child too
sleep 5
curl -sf "http://$EXT/inspect" | python3 -c '
import json, sys
bad = [(n["name"], c["index"], c["used"], c["capacity"]) for n in json.load(sys.stdin) for c in n["cards"] if c["used"] > c["capacity"]]
assert not bad, bad'
$K get pods -o json | python3 -c '
import collections, json, sys
used, cap = collections.Counter(), {("n1", 0): 32, ("n1", 1): 32, ("n2", 0): 80, ("n3", 0): 16}
cap.update({("n4", i): 16 for i in range(4)})
bound = 0
for p in json.load(sys.stdin)["items"]:
    if not p["spec"].get("nodeName"):
        continue
    bound += 1
    a = json.loads(p["metadata"]["annotations"]["gpushare.example.com/assignment"])
    assert a["node"] == p["spec"]["nodeName"], a
    for c in a["containers"]:
        used[(a["node"], c["cardIndex"])] += c["units"]
over = {k: v for k, v in used.items() if v > cap[k]}
assert not over, over
print("burst: %d pods bound, per card %s" % (bound, dict(sorted(used.items()))))'
curl -sf "http://$EXT/metrics" | grep '^gpushare_extender_binds_total'
echo "smoke: ok"
