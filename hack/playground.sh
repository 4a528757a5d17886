#!/usr/bin/env bash
# The playground: a local Kubernetes control plane (hack/cluster.sh) running
# gpushare's scheduler extender and three simulated GPU nodes (test/nodeagent:
# the real kubelet device manager + gpushare's device plugin on simulated
# NVML), with the example pods of docs/examples applied. Needs root (each node
# agent runs in its own mount namespace). The first run builds Kubernetes
# (hack/build-k8s.sh, ~7-10 min); later runs reuse everything.
#
# Usage: hack/playground.sh up | down | status
# Env:   GPUSHARE_PLAYGROUND (state dir, default /tmp/gpushare-playground)
#        GPUSHARE_EXTENDER_PORT (default 32766), GPUSHARE_POLICY (default binpack)
#        control-plane ports as in hack/cluster.sh (defaults here: etcd 24790/24800,
#        kube-apiserver 17443, controller-manager 21257, scheduler 21259)
# Running `up` twice does not break: what runs (checked by PID) is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${GPUSHARE_PLAYGROUND:-/tmp/gpushare-playground}"
EXTENDER_PORT="${GPUSHARE_EXTENDER_PORT:-32766}"
POLICY="${GPUSHARE_POLICY:-binpack}"
BIN="$ROOT/bin"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
KUBECONFIG_FILE="$STATE/kubeconfig"
K8S_BIN="${GPUSHARE_K8S_BIN:-${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-v1.34.4/bin}"
export GPUSHARE_STATE="$STATE"
# Its own ports, so that it does not collide with a plain hack/cluster.sh.
export GPUSHARE_ETCD_PORT="${GPUSHARE_ETCD_PORT:-24790}" GPUSHARE_ETCD_PEER_PORT="${GPUSHARE_ETCD_PEER_PORT:-24800}"
export GPUSHARE_APISERVER_PORT="${GPUSHARE_APISERVER_PORT:-17443}" GPUSHARE_KCM_PORT="${GPUSHARE_KCM_PORT:-21257}"
export GPUSHARE_SCHEDULER_PORT="${GPUSHARE_SCHEDULER_PORT:-21259}"

# Simulated nodes: name and card mix (the device plugin's --nvml=spec:...).
NODES=(
	"gpu-node-1=4x80GiB:NVIDIA-H100"
	"gpu-node-2=2x40GiB:NVIDIA-A100,2x24GiB:NVIDIA-L4"
	"gpu-node-3=8x24GiB:NVIDIA-L4"
)

log() { printf '%s playground: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# alive NAME BINARY prints the PID recorded for NAME if it runs BINARY.
alive() {
	local pid
	pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "^$2 " || return 1
	echo "$pid"
}

stop() {
	local name="$1" binary="$2" pid i
	if pid="$(alive "$name" "$binary")"; then
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 200; i++)); do
			[[ -d "/proc/$pid" ]] || break
			sleep 0.1
		done
		[[ -d "/proc/$pid" ]] && kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$PIDS/$name.pid"
}

cmd_down() {
	local n
	for n in "${NODES[@]}"; do
		stop "agent-${n%%=*}" "$BIN/gpushare-nodeagent"
	done
	stop extender "$BIN/gpushare-scheduler"
	"$ROOT/hack/cluster.sh" down
}

kubectl_() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

cmd_up() {
	[[ "$(id -u)" == 0 ]] || die "the node agents need root (a private mount namespace each)"
	mkdir -p "$PIDS" "$LOGS" "$BIN"
	UP_DONE=0
	trap 'if [[ $UP_DONE == 0 ]]; then log "up did not finish: stopping everything"; cmd_down; fi' EXIT
	trap 'exit 130' INT TERM

	log "building the control plane binaries (first run: ~7-10 min; then cached in $K8S_BIN)"
	"$ROOT/hack/build-k8s.sh"
	log "building gpushare's programs into $BIN"
	(cd "$ROOT" && make --no-print-directory build >/dev/null)
	(cd "$ROOT/test" && go build -o "$BIN/gpushare-nodeagent" ./nodeagent/cmd)

	# The playground's only scheduler: the gpushare profile, and default-scheduler so that pods
	# without schedulerName are scheduled too (through the same extender).
	"$ROOT/hack/cluster.sh" up --scheduler-config "$ROOT/scheduler/config/kube-scheduler-config.yaml" \
		--extender-url "http://127.0.0.1:${EXTENDER_PORT}" --extra-profile default-scheduler

	if pid="$(alive extender "$BIN/gpushare-scheduler")"; then
		log "extender already running (pid $pid)"
	else
		log "starting the extender on 127.0.0.1:${EXTENDER_PORT} (policy $POLICY)"
		setsid "$BIN/gpushare-scheduler" --kubeconfig "$KUBECONFIG_FILE" --listen "127.0.0.1:${EXTENDER_PORT}" \
			--policy "$POLICY" >>"$LOGS/gpushare-scheduler.log" 2>&1 </dev/null &
		echo $! >"$PIDS/extender.pid"
	fi
	local deadline=$((SECONDS + 60))
	until curl -fsS --max-time 2 "http://127.0.0.1:${EXTENDER_PORT}/readyz" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "extender not ready in 60 s; log: $LOGS/gpushare-scheduler.log"
		alive extender "$BIN/gpushare-scheduler" >/dev/null || die "extender exited; log: $LOGS/gpushare-scheduler.log"
		sleep 0.2
	done

	local n name spec
	for n in "${NODES[@]}"; do
		name="${n%%=*}" spec="${n#*=}"
		if pid="$(alive "agent-$name" "$BIN/gpushare-nodeagent")"; then
			log "node $name already running (agent pid $pid)"
			continue
		fi
		log "starting node $name: $spec"
		mkdir -p "$STATE/nodes/$name"
		setsid "$BIN/gpushare-nodeagent" --node "$name" --kubeconfig "$KUBECONFIG_FILE" \
			--state-dir "$STATE/nodes/$name" --labels "gpushare=true" \
			--plugin "$BIN/gpushare-device-plugin" -- "--nvml=spec:$spec" \
			>>"$STATE/nodes/$name/agent.log" 2>&1 </dev/null &
		echo $! >"$PIDS/agent-$name.pid"
	done
	for n in "${NODES[@]}"; do
		name="${n%%=*}"
		deadline=$((SECONDS + 90))
		until [[ "$(kubectl_ get node "$name" -o jsonpath='{.status.allocatable.example\.com/gpu-mem}' 2>/dev/null)" =~ ^[1-9] ]] &&
			kubectl_ wait --for=condition=Ready "node/$name" --timeout=1s >/dev/null 2>&1; do
			((SECONDS < deadline)) || die "node $name not Ready with GPU memory in 90 s; logs: $STATE/nodes/$name/"
			sleep 0.5
		done
		log "node $name Ready"
	done

	log "applying docs/examples"
	kubectl_ apply -f "$ROOT/docs/examples/" >&2
	# Wait until every example pod is either running or judged unschedulable
	# (PodScheduled=False, like too-big), so the first view is settled.
	deadline=$((SECONDS + 60))
	while kubectl_ get pods -l app.kubernetes.io/part-of=gpushare-examples -o \
		jsonpath='{range .items[?(@.status.phase=="Pending")]}{.metadata.name}:{.status.conditions[?(@.type=="PodScheduled")].status}{"\n"}{end}' |
		grep -qv ':False$'; do
		((SECONDS < deadline)) || {
			log "some example pods are still starting; look again with kubectl get pods"
			break
		}
		sleep 0.5
	done
	UP_DONE=1
	echo
	"$BIN/kubectl-inspect-gpushare" --kubeconfig "$KUBECONFIG_FILE" -d || true
	cat <<EOF

The playground runs (state, logs and PIDs in $STATE). Try:

  export KUBECONFIG=$KUBECONFIG_FILE
  export PATH=$BIN:$K8S_BIN:\$PATH      # kubectl, and kubectl-inspect-gpushare as "kubectl inspect gpushare"
  kubectl get pods -o wide
  kubectl inspect gpushare -d
  kubectl describe pod too-big            # the extender's reason it stays Pending
  kubectl get pod single -o jsonpath='{.metadata.annotations.gpushare\.example\.com/e2e-containers}'
                                          # what the container got (mounts, env), recorded by the node agent
  kubectl apply -f docs/examples/...      # or your own pods (schedulerName gpushare-scheduler or none: both go through gpushare here)

Stop everything: make playground-down
EOF
}

cmd_status() {
	local n pid
	"$ROOT/hack/cluster.sh" status || true
	if pid="$(alive extender "$BIN/gpushare-scheduler")"; then echo "extender running (pid $pid)"; else echo "extender stopped"; fi
	for n in "${NODES[@]}"; do
		if pid="$(alive "agent-${n%%=*}" "$BIN/gpushare-nodeagent")"; then
			echo "node ${n%%=*} running (agent pid $pid)"
		else
			echo "node ${n%%=*} stopped"
		fi
	done
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
