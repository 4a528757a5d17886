#!/usr/bin/env bash
# The playground: a local Kubernetes control plane (hack/cluster.sh) running
# gpushare's scheduler extender and three simulated GPU nodes (test/nodeagent:
# the real kubelet device manager + gpushare's device plugin on simulated
# NVML), with the example pods of docs/examples applied. Needs root (each node
# agent runs in its own mount namespace). The first run builds Kubernetes
# (hack/build-k8s.sh, ~7 min on 2 idle cores); later runs reuse the binaries.
#
# It runs the shipped configuration: the chart (charts/gpushare) is installed
# with helm into gpushare-system, so the admission policies, RBAC, ServiceAccounts
# and the record key Secret are the chart's own, with DRA on (its DeviceClass and
# ResourceSlice policy); only its pods are kept off (the
# extender and the plugins run here as processes, see install_chart). The
# extender runs as the chart's extender ServiceAccount, each plugin as the chart's
# device-plugin ServiceAccount with a token bound to its Node (the node name the
# policies check), and both sign/verify records with the key from the chart's
# Secret (--record-key-dir). No TLS: like the chart's dedicated mode, the verbs
# listen on 127.0.0.1 for the kube-scheduler beside them.
#
# Usage: hack/playground.sh up | down [--clean] | status
#   up      a fresh playground (default): whatever runs of the last one is stopped and its state
#           (etcd data: its pods, nodes, annotations) deleted first. GPUSHARE_PLAYGROUND_KEEP=1
#           (make playground KEEP=1) resumes the last one instead: what runs is kept, what was
#           stopped starts again on its old state, old pods included.
#           The ports are checked before anything is built.
#   down    stops every process of the playground: the ones it recorded (PID files) and any
#           extender, node agent or device plugin of this binary folder started by hand for this
#           playground's kubeconfig (found in /proc, paths resolved). The state stays for KEEP=1;
#           --clean (make playground-down CLEAN=1) deletes it too.
# Env:   GPUSHARE_PLAYGROUND (state dir, default /tmp/gpushare-playground)
#        GPUSHARE_PLAYGROUND_NODE_SCOPE=1 (make playground NODE_SCOPE=1): the configuration for nodes
#        whose kubelet identity the plugin cannot use (devicePlugin.nodeCredential.kubeconfig="",
#        nodeScope.enabled): the plugins read with their ServiceAccount, and kube-apiserver asks the
#        extender's node-scope webhook (the chart's authorizer entry, between Node and RBAC; the API
#        server is restarted once with it). GPUSHARE_NODE_SCOPE_PORT (default 32767)
#        GPUSHARE_PLAYGROUND_CONTAINER_RECORDS=0 (make playground CONTAINER_RECORDS=0): the node agents
#        write no container records (the e2e-containers annotation: one write per pod that a kubelet
#        does not make; make bench-burst counts it in every pod's time to Ready otherwise)
#        GPUSHARE_EXTENDER_PORT (default 32766), GPUSHARE_POLICY (default frag, the binary's),
#        GPUSHARE_ALLOWED_POLICIES (policies pods may name; default binpack,spread, for docs/examples/spread.yaml)
#        control-plane ports (defaults here): GPUSHARE_ETCD_PORT=24790 GPUSHARE_ETCD_PEER_PORT=24800
#        GPUSHARE_APISERVER_PORT=17443 GPUSHARE_KCM_PORT=21257 GPUSHARE_SCHEDULER_PORT=21259
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${GPUSHARE_PLAYGROUND:-/tmp/gpushare-playground}"
EXTENDER_PORT="${GPUSHARE_EXTENDER_PORT:-32766}"
POLICY="${GPUSHARE_POLICY:-frag}"
ALLOWED_POLICIES="${GPUSHARE_ALLOWED_POLICIES-binpack,spread}"
KEEP="${GPUSHARE_PLAYGROUND_KEEP:-0}"
NODE_SCOPE="${GPUSHARE_PLAYGROUND_NODE_SCOPE:-0}"
CONTAINER_RECORDS="${GPUSHARE_PLAYGROUND_CONTAINER_RECORDS:-1}"
NODE_SCOPE_PORT="${GPUSHARE_NODE_SCOPE_PORT:-32767}"
# The file that marks a directory as a playground's state (remove_state checks it).
MARKER=.gpushare-playground
BIN="$ROOT/bin"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
KUBECONFIG_FILE="$STATE/kubeconfig"
# The chart's release: names as the chart makes them for release "gpushare".
RELEASE=gpushare
NAMESPACE=gpushare-system
# Kubeconfigs (and their token files) of the chart's ServiceAccounts, and the record key.
IDENTITIES="$STATE/identities"
RECORD_KEY_DIR="$STATE/record-key"
# The public halves, as the extender publishes them in the chart's ConfigMap: what the plugins get.
RECORD_PUBLIC_KEY_DIR="$STATE/record-public-key"
K8S_BIN="${GPUSHARE_K8S_BIN:-${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-${K8S_VERSION:-$(cat "$ROOT/hack/k8s-version")}/bin}"
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

# exe_of PID prints the absolute path of the program PID runs (also after the
# file was replaced by a rebuild: /proc shows "PATH (deleted)").
exe_of() {
	local exe
	exe="$(readlink "/proc/$1/exe" 2>/dev/null)" || return 1
	echo "${exe% (deleted)}"
}

# kubeconfig_of PID prints the absolute path of the kubeconfig PID was given:
# --kubeconfig[=]FILE, else GPUSHARE_KUBECONFIG or KUBECONFIG in its
# environment; a relative path is resolved against the process's directory.
kubeconfig_of() {
	local pid="$1" kc="" prev="" a
	local -a args
	mapfile -d '' args <"/proc/$pid/cmdline" 2>/dev/null || return 1
	for a in "${args[@]}"; do
		case "$prev" in --kubeconfig | -kubeconfig) kc="$a" ;; esac
		case "$a" in --kubeconfig=* | -kubeconfig=*) kc="${a#*=}" ;; esac
		prev="$a"
	done
	if [[ -z "$kc" ]]; then
		kc="$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^GPUSHARE_KUBECONFIG=//p; s/^KUBECONFIG=//p' | head -n1)"
	fi
	[[ -n "$kc" ]] || return 1
	[[ "$kc" == /* ]] || kc="$(readlink "/proc/$pid/cwd")/$kc"
	realpath -m "$kc"
}

# pids_of BINARY prints the PIDs running BINARY (by absolute path, however it
# was started) for one of this playground's kubeconfigs: the admin's, or one of
# the ServiceAccount kubeconfigs in identities/.
pids_of() {
	local want kc ids exe p k
	want="$(realpath -m "$1")" kc="$(realpath -m "$KUBECONFIG_FILE")" ids="$(realpath -m "$IDENTITIES")"
	# One find over /proc/PID/exe (a fork per process is slow on a busy machine).
	for exe in $(find /proc -mindepth 2 -maxdepth 2 -name exe \( -lname "$want" -o -lname "$want (deleted)" \) 2>/dev/null); do
		p="${exe#/proc/}" p="${p%/exe}"
		[[ "$p" =~ ^[0-9]+$ ]] || continue
		k="$(kubeconfig_of "$p")" || continue
		[[ "$k" == "$kc" || "$k" == "$ids"/* ]] && echo "$p"
	done
	return 0
}

# recorded NAME BINARY prints the PID in NAME's PID file if that process runs
# BINARY.
recorded() {
	local pid
	pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 1
	[[ "$pid" =~ ^[0-9]+$ && "$(exe_of "$pid")" == "$(realpath -m "$2")" ]] || return 1
	echo "$pid"
}

# alive NAME BINARY [scan] prints the PID of NAME: the recorded one, else
# (with scan) one found by pids_of.
alive() {
	local pid
	if pid="$(recorded "$1" "$2")"; then
		echo "$pid"
		return 0
	fi
	[[ "${3:-}" == scan ]] || return 1
	pid="$(pids_of "$2" | head -n1)"
	[[ -n "$pid" ]] && echo "$pid"
}

# stop NAME BINARY [scan] stops NAME's recorded process and (with scan) every
# one pids_of finds.
stop() {
	local name="$1" binary="$2" pid pids i
	pids="$( (
		recorded "$name" "$binary" || true
		[[ "${3:-}" != scan ]] || pids_of "$binary"
	) | sort -u)"
	for pid in $pids; do
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in $pids; do
		for ((i = 0; i < 200; i++)); do
			[[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || break
			sleep 0.1
		done
		[[ -d "/proc/$pid" ]] && kill -KILL "$pid" 2>/dev/null
	done
	rm -f "$PIDS/$name.pid"
}

cmd_down() {
	local n clean=0
	case "${1:-}" in
	"") ;;
	--clean) clean=1 ;;
	*) die "down: unknown argument $1 (want --clean or nothing)" ;;
	esac
	for n in "${NODES[@]}"; do
		stop "agent-${n%%=*}" "$BIN/gpushare-nodeagent"
	done
	# Then whatever of this playground was started by hand (or left behind):
	# agents, device plugins, extenders.
	stop node-agent "$BIN/gpushare-nodeagent" scan
	stop device-plugin "$BIN/gpushare-device-plugin" scan
	stop extender "$BIN/gpushare-scheduler" scan
	"$ROOT/hack/cluster.sh" down
	if ((clean)); then
		remove_state
	fi
}

# remove_state deletes the state dir, if it is a playground's (it has the
# marker file, or the pids/ and kubeconfig an older playground left).
remove_state() {
	[[ -e "$STATE" ]] || return 0
	[[ "$STATE" == /* && "$(realpath -m "$STATE")" != / ]] || die "GPUSHARE_PLAYGROUND=$STATE: want an absolute path other than /"
	if [[ -f "$STATE/$MARKER" || (-d "$STATE/pids" && -f "$STATE/kubeconfig") ]]; then
		log "removing the old playground's state ($STATE)"
		rm -rf "$STATE"
	else
		die "$STATE is not a playground's state dir (no $MARKER): not deleting it; set GPUSHARE_PLAYGROUND to another dir, or remove it yourself"
	fi
}

# preflight: every port the playground needs is free (or, with KEEP, held by
# the playground's own process), before anything is built.
preflight() {
	"$ROOT/hack/cluster.sh" check-ports || exit 1
	if ! alive extender "$BIN/gpushare-scheduler" scan >/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$EXTENDER_PORT") 2>/dev/null; then
		die "port 127.0.0.1:$EXTENDER_PORT (for the extender) is taken; set GPUSHARE_EXTENDER_PORT to a free port, e.g. GPUSHARE_EXTENDER_PORT=$((EXTENDER_PORT + 1))"
	fi
	if [[ "$NODE_SCOPE" == 1 ]] && ! alive extender "$BIN/gpushare-scheduler" scan >/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$NODE_SCOPE_PORT") 2>/dev/null; then
		die "port 127.0.0.1:$NODE_SCOPE_PORT (for the node-scope webhook) is taken; set GPUSHARE_NODE_SCOPE_PORT to a free port"
	fi
}

kubectl_() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# install_chart installs (or, with KEEP, upgrades) the chart as shipped, in its default dedicated
# mode, so that the admission policies, RBAC, ServiceAccounts and the record key Secret in the
# cluster are the chart's. Its pods are kept off, because this playground runs the extender and
# the plugins as processes on simulated nodes (an image cannot run there): the DaemonSet and the
# Deployment get a nodeSelector no node has, and the Deployment is scaled to 0 so that no pod of it
# pends. Then it writes the record key of the chart's Secret into $RECORD_KEY_DIR (both programs
# re-read it every 5 s) and the extender's kubeconfig.
install_chart() {
	local helm off='{"gpushare.example.com/playground":"runs-this-as-a-process"}' k v
	helm="$("$ROOT/hack/tools.sh" helm)"
	log "installing the chart (charts/gpushare) as release $RELEASE in $NAMESPACE: admission policies, RBAC, record key"
	local scope=()
	[[ "$NODE_SCOPE" != 1 ]] || scope=(--set nodeScope.enabled=true --set devicePlugin.nodeCredential.kubeconfig=
		--set "nodeScope.serverURL=https://127.0.0.1:${NODE_SCOPE_PORT}/authorize" --set "scheduler.extender.tls.extraSANs={127.0.0.1}")
	"$helm" upgrade --install "$RELEASE" "$ROOT/charts/gpushare" --kubeconfig "$KUBECONFIG_FILE" \
		--namespace "$NAMESPACE" --create-namespace --set dra.enabled=true "${scope[@]}" \
		--set-json "devicePlugin.nodeSelector=$off" --set-json "scheduler.nodeSelector=$off" >"$LOGS/helm.log" 2>&1 ||
		die "helm install failed: $(cat "$LOGS/helm.log")"
	kubectl_ -n "$NAMESPACE" scale "deployment/$RELEASE-scheduler" --replicas=0 >/dev/null
	mkdir -p "$RECORD_KEY_DIR" "$IDENTITIES"
	for k in current previous; do
		v="$(kubectl_ -n "$NAMESPACE" get secret "$RELEASE-record-key" -o "jsonpath={.data.$k}")"
		if [[ -n "$v" ]]; then base64 -d <<<"$v" >"$RECORD_KEY_DIR/$k.new" && mv "$RECORD_KEY_DIR/$k.new" "$RECORD_KEY_DIR/$k"; else rm -f "$RECORD_KEY_DIR/$k"; fi
	done
	[[ -s "$RECORD_KEY_DIR/current" ]] || die "the chart's Secret $NAMESPACE/$RELEASE-record-key has no key in 'current'"
	mkdir -p "$RECORD_PUBLIC_KEY_DIR"
	for k in current previous; do
		if [[ -s "$RECORD_KEY_DIR/$k" ]]; then openssl pkey -in "$RECORD_KEY_DIR/$k" -pubout -outform DER | tail -c 32 | base64 -w0 >"$RECORD_PUBLIC_KEY_DIR/$k"; else rm -f "$RECORD_PUBLIC_KEY_DIR/$k"; fi
	done
	write_identity extender "$RELEASE-scheduler"
}

# node_scope_config writes, from the chart's Secrets, what an operator gives kube-apiserver for the
# node-scope webhook (docs/security.md) and the extender's serving certificate, into
# $STATE/node-scope/, and exports GPUSHARE_AUTHORIZATION_CONFIG: Node, the chart's entry, RBAC.
node_scope_config() {
	local d="$STATE/node-scope" k
	mkdir -p "$d"
	for k in tls.crt tls.key; do
		kubectl_ -n "$NAMESPACE" get secret "$RELEASE-node-scope-tls" -o "jsonpath={.data.${k//./\\.}}" | base64 -d >"$d/$k"
	done
	kubectl_ -n "$NAMESPACE" get secret "$RELEASE-node-scope-apiserver" -o 'jsonpath={.data.webhook\.kubeconfig}' | base64 -d >"$d/webhook.kubeconfig"
	{
		printf 'apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Node\n  name: node\n'
		kubectl_ -n "$NAMESPACE" get secret "$RELEASE-node-scope-apiserver" -o 'jsonpath={.data.authorizer\.yaml}' | base64 -d |
			sed "s|/etc/kubernetes/gpushare-node-scope.kubeconfig|$d/webhook.kubeconfig|"
		printf -- '- type: RBAC\n  name: rbac\n'
	} >"$d/authorization.yaml"
	[[ -s "$d/tls.crt" && -s "$d/tls.key" ]] && grep -q 'gpushare-node-scope' "$d/authorization.yaml" ||
		die "the chart's node-scope Secrets are incomplete (nodeScope.enabled=true)"
	export GPUSHARE_AUTHORIZATION_CONFIG="$d/authorization.yaml"
}

# write_identity NAME SERVICEACCOUNT [NODE] writes $IDENTITIES/NAME.kubeconfig for a token of the
# chart's SERVICEACCOUNT (bound to Node NODE if given: the token then carries the node's name,
# authentication.kubernetes.io/node-name, which the chart's policies require of the device
# plugin's writes). The kubeconfig names the token by tokenFile, which client-go re-reads: a
# later `up` (KEEP=1) refreshes the token under programs that keep running.
write_identity() {
	local name="$1" sa="$2" node="${3:-}" bound=()
	[[ -z "$node" ]] || bound=(--bound-object-kind Node --bound-object-name "$node")
	kubectl_ -n "$NAMESPACE" create token "$sa" --duration=168h "${bound[@]}" >"$IDENTITIES/$name.token.new" ||
		die "no token for ServiceAccount $NAMESPACE/$sa"
	mv "$IDENTITIES/$name.token.new" "$IDENTITIES/$name.token"
	cat >"$IDENTITIES/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: playground, cluster: {server: "https://127.0.0.1:${GPUSHARE_APISERVER_PORT}", certificate-authority: "$STATE/pki/ca.crt"}}]
users: [{name: $sa, user: {tokenFile: "$IDENTITIES/$name.token"}}]
contexts: [{name: $sa, context: {cluster: playground, user: $sa, namespace: $NAMESPACE}}]
current-context: $sa
EOF
}

# write_node_credential NODE writes $IDENTITIES/node-NODE.kubeconfig: the node's own identity as a
# kubelet holds it (a client certificate for system:node:NODE in group system:nodes, signed by the
# cluster's CA, named by file as in kubeadm's kubelet.conf). The plugin reads its node's pods and
# Node with it (--node-kubeconfig, the chart's devicePlugin.nodeCredential); the API server's Node
# authorizer confines those reads to NODE.
write_node_credential() {
	local n="$1" d="$IDENTITIES/node-$1"
	mkdir -p "$d"
	if [[ ! -s "$d/kubelet-client-current.pem" ]]; then
		openssl req -newkey rsa:2048 -nodes -keyout "$d/key.pem" -out "$d/csr.pem" -subj "/O=system:nodes/CN=system:node:$n" 2>/dev/null
		printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$d/ext.cnf"
		openssl x509 -req -in "$d/csr.pem" -CA "$STATE/pki/ca.crt" -CAkey "$STATE/pki/ca.key" -CAcreateserial \
			-out "$d/cert.pem" -days 365 -extfile "$d/ext.cnf" 2>/dev/null || die "no node certificate for $n"
		cat "$d/cert.pem" "$d/key.pem" >"$d/kubelet-client-current.pem"
		chmod 600 "$d/kubelet-client-current.pem" "$d/key.pem"
		rm -f "$d/csr.pem" "$d/ext.cnf"
	fi
	cat >"$IDENTITIES/node-$n.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: playground, cluster: {server: "https://127.0.0.1:${GPUSHARE_APISERVER_PORT}", certificate-authority: "$STATE/pki/ca.crt"}}]
users: [{name: "system:node:$n", user: {client-certificate: "$d/kubelet-client-current.pem", client-key: "$d/kubelet-client-current.pem"}}]
contexts: [{name: node, context: {cluster: playground, user: "system:node:$n"}}]
current-context: node
EOF
}

# node_identity NODE creates the Node (labelled as the node agent would) if it does not exist, so
# that a token can be bound to it, and writes the device plugin's kubeconfigs for it: the chart's
# ServiceAccount's (writes) and the node's own (reads).
node_identity() {
	if ! kubectl_ get node "$1" >/dev/null 2>&1; then
		kubectl_ create -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1, kubernetes.io/os: linux, kubernetes.io/arch: amd64, gpushare: "true"}
EOF
	fi
	write_identity "plugin-$1" "$RELEASE-device-plugin" "$1"
	write_node_credential "$1"
}

cmd_up() {
	[[ "$(id -u)" == 0 ]] || die "the node agents need root (a private mount namespace each)"
	if [[ "$KEEP" == 1 ]]; then
		log "resuming the last playground (GPUSHARE_PLAYGROUND_KEEP=1): what runs is kept, old state and pods included"
	else
		log "starting a fresh playground (KEEP=1 resumes the last one instead)"
		cmd_down
		remove_state
	fi
	preflight
	mkdir -p "$PIDS" "$LOGS" "$BIN"
	touch "$STATE/$MARKER"
	UP_DONE=0
	trap 'if [[ $UP_DONE == 0 ]]; then log "up did not finish: stopping everything"; cmd_down; fi' EXIT
	trap 'exit 130' INT TERM

	log "building the control plane binaries (first run: 5 binaries, ~7 min on 2 idle cores, longer on a busy machine; progress below; then cached in $K8S_BIN)"
	"$ROOT/hack/build-k8s.sh"
	log "building gpushare's programs into $BIN"
	(cd "$ROOT" && make --no-print-directory build >/dev/null)
	(cd "$ROOT/test" && go build -o "$BIN/gpushare-nodeagent" ./nodeagent/cmd)

	# The playground's only scheduler: the gpushare profile, and default-scheduler so that pods
	# without schedulerName are scheduled too (through the same extender).
	local up=(up --scheduler-config "$ROOT/scheduler/config/kube-scheduler-config.yaml"
		--extender-url "http://127.0.0.1:${EXTENDER_PORT}" --extra-profile default-scheduler)
	[[ "$NODE_SCOPE" != 1 || ! -s "$STATE/node-scope/authorization.yaml" ]] ||
		export GPUSHARE_AUTHORIZATION_CONFIG="$STATE/node-scope/authorization.yaml"
	"$ROOT/hack/cluster.sh" "${up[@]}"
	install_chart
	if [[ "$NODE_SCOPE" == 1 && -z "${GPUSHARE_AUTHORIZATION_CONFIG:-}" ]]; then
		log "node scope: restarting kube-apiserver with the chart's node-scope authorizer (between Node and RBAC)"
		node_scope_config
		"$ROOT/hack/cluster.sh" stop kube-apiserver
		"$ROOT/hack/cluster.sh" "${up[@]}"
	fi
	local scope_args=() read_args=(--node-kubeconfig)
	if [[ "$NODE_SCOPE" == 1 ]]; then
		scope_args=(--node-scope-listen "127.0.0.1:${NODE_SCOPE_PORT}" --node-scoped-users "system:serviceaccount:$NAMESPACE:$RELEASE-device-plugin"
			--node-scope-tls-cert-file "$STATE/node-scope/tls.crt" --node-scope-tls-private-key-file "$STATE/node-scope/tls.key")
		read_args=()
	fi

	local pid
	if pid="$(alive extender "$BIN/gpushare-scheduler" scan)"; then
		log "extender already running (pid $pid)"
	else
		log "starting the extender on 127.0.0.1:${EXTENDER_PORT} (policy $POLICY, pods may name: ${ALLOWED_POLICIES:-none other})"
		# As the chart's extender: its ServiceAccount, its record key, and the ConfigMap through
		# which the chart's request-size policy learns the largest card.
		cat >"$STATE/extender-config.yaml" <<-EOF
			apiVersion: gpushare.example.com/v1alpha1
			kind: SchedulerConfiguration
			policy: $POLICY
			allowedPolicies: [$ALLOWED_POLICIES]
			recordPublicKeyConfigMap: $NAMESPACE/$RELEASE-record-public-key
			cardLimitsConfigMap: $NAMESPACE/$RELEASE-card-limits
		EOF
		setsid "$BIN/gpushare-scheduler" --kubeconfig "$IDENTITIES/extender.kubeconfig" --listen "127.0.0.1:${EXTENDER_PORT}" \
			--config "$STATE/extender-config.yaml" --record-key-dir "$RECORD_KEY_DIR" "${scope_args[@]}" >>"$LOGS/gpushare-scheduler.log" 2>&1 </dev/null &
		pid=$!
	fi
	echo "$pid" >"$PIDS/extender.pid"
	local deadline=$((SECONDS + 60))
	until curl -fsS --max-time 2 "http://127.0.0.1:${EXTENDER_PORT}/readyz" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "extender not ready in 60 s; log: $LOGS/gpushare-scheduler.log"
		# Not alive: just after the start the child may not have exec'd the binary yet.
		[[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] ||
			die "extender exited; log: $LOGS/gpushare-scheduler.log"
		sleep 0.2
	done

	local n name spec
	for n in "${NODES[@]}"; do
		name="${n%%=*}" spec="${n#*=}"
		node_identity "$name"
		if pid="$(alive "agent-$name" "$BIN/gpushare-nodeagent")"; then
			log "node $name already running (agent pid $pid)"
			continue
		fi
		log "starting node $name: $spec"
		mkdir -p "$STATE/nodes/$name"
		printf 'apiVersion: gpushare.example.com/v1alpha1\nkind: DevicePluginConfiguration\nrecordKeyDir: %s\n' \
			"$RECORD_PUBLIC_KEY_DIR" >"$STATE/nodes/$name/device-plugin-config.yaml"
		# The agent plays the kubelet (admin kubeconfig); the plugin it starts runs as the chart's
		# device plugin on this node: the chart's ServiceAccount writes, the node's own identity
		# reads, with the chart's record key.
		setsid "$BIN/gpushare-nodeagent" --node "$name" --kubeconfig "$KUBECONFIG_FILE" \
			--state-dir "$STATE/nodes/$name" --labels "gpushare=true" $([[ "$CONTAINER_RECORDS" == 0 ]] && echo --no-container-records) \
			--plugin "$BIN/gpushare-device-plugin" --plugin-env "KUBECONFIG=$IDENTITIES/plugin-$name.kubeconfig" \
			-- "--nvml=spec:$spec" --config "$STATE/nodes/$name/device-plugin-config.yaml" ${read_args[@]:+"${read_args[@]}" "$IDENTITIES/node-$name.kubeconfig"} \
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

	# The chart's request-size policy refuses pods asking more than the largest card once the
	# extender has published that size.
	deadline=$((SECONDS + 30))
	until [[ -n "$(kubectl_ -n "$NAMESPACE" get configmap "$RELEASE-card-limits" -o jsonpath='{.data.maxUnitsPerCard}' 2>/dev/null)" ]]; do
		((SECONDS < deadline)) || die "the extender did not publish the largest card in $NAMESPACE/$RELEASE-card-limits in 30 s; log: $LOGS/gpushare-scheduler.log"
		sleep 0.5
	done
	log "applying docs/examples"
	local f out
	for f in "$ROOT"/docs/examples/*.yaml; do
		[[ "$f" == */too-big.yaml ]] || kubectl_ apply -f "$f" >&2
	done
	# too-big asks more than any card has: the chart's admission policy refuses it at creation.
	if out="$(kubectl_ apply -f "$ROOT/docs/examples/too-big.yaml" 2>&1)"; then
		die "docs/examples/too-big.yaml was admitted: the chart's request-size policy is not in force"
	fi
	log "docs/examples/too-big.yaml refused, as it should be: ${out}"
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
  kubectl apply -f docs/examples/too-big.yaml   # 200 GiB fits no card: the chart's admission policy refuses it
  kubectl get pod single -o jsonpath='{.metadata.annotations.gpushare\.example\.com/assignment}'
                                          # the record of its card, signed with the chart's record key
  kubectl get pods h100-only not-l4 -o wide; kubectl get pods -l app=spread -o wide   # pods that chose cards, a policy
  kubectl get pod single -o jsonpath='{.metadata.annotations.gpushare\.example\.com/e2e-containers}'
                                          # what the container got (mounts, env), recorded by the node agent
  kubectl apply -f docs/examples/...      # or your own pods: GPU pods with schedulerName gpushare-scheduler (the chart's policy refuses others)
  kubectl get validatingadmissionpolicies # the chart's policies (helm -n $NAMESPACE list: the release)
  kubectl annotate node gpu-node-2 gpushare.example.com/isolate=0   # take card 0 out of service
  kubectl annotate node gpu-node-2 gpushare.example.com/isolate-    # put it back (the trailing - removes the annotation)

Stop everything: make playground-down (the next make playground starts fresh; KEEP=1 resumes this one)
EOF
}

cmd_status() {
	local n pid
	"$ROOT/hack/cluster.sh" status || true
	if pid="$(alive extender "$BIN/gpushare-scheduler" scan)"; then echo "extender running (pid $pid)"; else echo "extender stopped"; fi
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
down) cmd_down "${@:2}" ;;
status) cmd_status ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
