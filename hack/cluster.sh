#!/usr/bin/env bash
# A local Kubernetes control plane for gpushare's end-to-end tests and
# playground: etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
# all bound to 127.0.0.1, run from the binaries hack/build-k8s.sh caches.
# There is no kubelet: the simulated GPU node agents (test/nodeagent) play it.
#
# Usage:
#   hack/cluster.sh up [--scheduler-config FILE] [--extender-url URL] [--extra-profile NAME]...
#   hack/cluster.sh down [--clean]     stop every process by its PID (--clean: also delete the state dir)
#   hack/cluster.sh stop COMPONENT     stop one (e.g. kube-scheduler; `up` starts it again)
#   hack/cluster.sh status             which processes run, where the kubeconfig is
#   hack/cluster.sh check-ports        fail, naming the variable to set, if a port `up` needs is taken
#   hack/cluster.sh env                print `export KUBECONFIG=...`
#
# `up` generates certificates (openssl), starts what is not already running,
# waits for each component's health endpoint and writes the admin kubeconfig.
# Running it twice does not break: live processes (checked by PID and command
# line) are kept. If `up` fails, every process of the cluster is stopped.
#
# State (certs, etcd data, kubeconfig, pids/, logs/) lives in
# ${GPUSHARE_STATE:-/tmp/gpushare-cluster}. Ports (env):
#   GPUSHARE_ETCD_PORT=23790 GPUSHARE_ETCD_PEER_PORT=23800 GPUSHARE_APISERVER_PORT=16443
#   GPUSHARE_KCM_PORT=20257 GPUSHARE_SCHEDULER_PORT=20259
# Other env: GPUSHARE_K8S_BIN (binaries; default the build-k8s.sh cache),
#   GPUSHARE_SCHEDULER_CONFIG / GPUSHARE_EXTENDER_URL (same as the flags),
#   --extra-profile NAME adds a scheduler profile (e.g. default-scheduler, so that pods
#   without schedulerName are scheduled too; the config's extenders apply to every profile),
#   GPUSHARE_SCHEDULER=0 (do not start kube-scheduler),
#   GPUSHARE_KCM_CONTROLLERS (default '*': all controllers, node lifecycle included,
#   so the not-ready taint is removed once a node agent reports Ready),
#   GPUSHARE_READY_TIMEOUT (seconds per component, default 60),
#   GPUSHARE_SCHEDULER_QPS, GPUSHARE_SCHEDULER_BURST (default empty: kube-scheduler's own, 50 and
#   100): kube-scheduler's API client budget (clientConnection.qps/burst), e.g. for benchmarks,
#   GPUSHARE_APISERVER_ADDRESS (default empty: everything on 127.0.0.1): an address pods reach the
#   API server at (the e2e pod network's gateway): kube-apiserver then listens on every address,
#   advertises this one and keeps the kubernetes Service's endpoints on it (lease reconciler),
#   GPUSHARE_AUTHORIZATION_CONFIG (default empty: --authorization-mode=Node,RBAC, as kubeadm sets
#   it): an AuthorizationConfiguration file for kube-apiserver's --authorization-config (e.g. with
#   the extender's node-scope webhook between Node and RBAC).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-$(cat "$(dirname "${BASH_SOURCE[0]}")/k8s-version")}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_K8S_BIN:-${CACHE}/k8s-${K8S_VERSION}/bin}"
STATE="${GPUSHARE_STATE:-/tmp/gpushare-cluster}"
ETCD_PORT="${GPUSHARE_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${GPUSHARE_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${GPUSHARE_APISERVER_PORT:-16443}"
KCM_PORT="${GPUSHARE_KCM_PORT:-20257}"
SCHEDULER_PORT="${GPUSHARE_SCHEDULER_PORT:-20259}"
KCM_CONTROLLERS="${GPUSHARE_KCM_CONTROLLERS:-*}"
READY_TIMEOUT="${GPUSHARE_READY_TIMEOUT:-60}"
SCHEDULER_CONFIG="${GPUSHARE_SCHEDULER_CONFIG:-}"
EXTENDER_URL="${GPUSHARE_EXTENDER_URL:-}"
EXTRA_PROFILES=()
START_SCHEDULER="${GPUSHARE_SCHEDULER:-1}"
PROFILING="${GPUSHARE_PROFILING:-false}" # true: /debug/pprof on kube-apiserver, kube-controller-manager and kube-scheduler
APISERVER_ADDRESS="${GPUSHARE_APISERVER_ADDRESS:-}"
SCHEDULER_QPS="${GPUSHARE_SCHEDULER_QPS:-}"
SCHEDULER_BURST="${GPUSHARE_SCHEDULER_BURST:-}"

PKI="$STATE/pki"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
KUBECONFIG_FILE="$STATE/kubeconfig"
# Stop order: the reverse of the start order.
COMPONENTS=(kube-scheduler kube-controller-manager kube-apiserver etcd)

log() { printf '%s cluster: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# pid_of NAME prints the PID of the component if it is alive and really is
# that binary (a recycled PID is not ours).
pid_of() {
	local name="$1" pid
	[[ -f "$PIDS/$name.pid" ]] || return 1
	pid="$(cat "$PIDS/$name.pid")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$BIN/$name " || return 1
	echo "$pid"
}

# own_child NAME prints the recorded PID if it is a child of this very script
# (started by this `up`, possibly not yet exec'd into the binary).
own_child() {
	local pid
	pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ "$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)" == "$$" ]] || return 1
	echo "$pid"
}

stop_one() {
	local name="$1" pid i
	if pid="$(pid_of "$name")" || pid="$(own_child "$name")"; then
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			[[ -d "/proc/$pid" ]] || break
			# A zombie (already exited, not yet reaped by its parent) is gone for us.
			[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && break
			sleep 0.1
		done
		if [[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]; then
			log "$name (pid $pid) did not stop in 10 s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$PIDS/$name.pid"
}

cmd_down() {
	local clean=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--clean) clean=1 ;;
		*) die "down: unknown argument $1" ;;
		esac
		shift
	done
	local c
	for c in "${COMPONENTS[@]}"; do
		stop_one "$c"
	done
	if [[ $clean -eq 1 ]]; then
		log "removing $STATE"
		rm -rf "$STATE"
	fi
}

# ---- certificates ---------------------------------------------------------

gen_certs() {
	mkdir -p "$PKI"
	chmod 700 "$PKI"
	if [[ -f "$PKI/admin.crt" && -f "$PKI/sa.pub" ]]; then
		return
	fi
	log "generating certificates in $PKI"
	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 \
			-subj "/CN=gpushare-local-ca" 2>/dev/null
		cat >apiserver.ext <<-EOF
			basicConstraints=CA:FALSE
			keyUsage=digitalSignature,keyEncipherment
			extendedKeyUsage=serverAuth
			subjectAltName=IP:127.0.0.1,IP:10.0.0.1${APISERVER_ADDRESS:+,IP:$APISERVER_ADDRESS},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
		EOF
		openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
			-subj "/CN=kube-apiserver" 2>/dev/null
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-out apiserver.crt -days 365 -extfile apiserver.ext 2>/dev/null
		cat >client.ext <<-EOF
			basicConstraints=CA:FALSE
			keyUsage=digitalSignature,keyEncipherment
			extendedKeyUsage=clientAuth
		EOF
		openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
			-subj "/O=system:masters/CN=gpushare-admin" 2>/dev/null
		openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-out admin.crt -days 365 -extfile client.ext 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		rm -f ./*.csr ./*.ext
	)
}

write_kubeconfig() {
	cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpushare
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority: ${PKI}/ca.crt
users:
- name: gpushare-admin
  user:
    client-certificate: ${PKI}/admin.crt
    client-key: ${PKI}/admin.key
contexts:
- name: gpushare
  context:
    cluster: gpushare
    user: gpushare-admin
current-context: gpushare
EOF
	chmod 600 "$KUBECONFIG_FILE"
}

# ---- kube-scheduler configuration -------------------------------------------

# write_scheduler_config writes $STATE/kube-scheduler-config.yaml: the given
# KubeSchedulerConfiguration (or a minimal one) with clientConnection.kubeconfig
# set to this cluster's kubeconfig, leader election off unless the file sets it,
# every extender urlPrefix replaced by --extender-url when one is given, and
# one profile per --extra-profile appended to its profiles list.
write_scheduler_config() {
	local out="$STATE/kube-scheduler-config.yaml"
	if [[ -n "$SCHEDULER_CONFIG" ]]; then
		[[ -f "$SCHEDULER_CONFIG" ]] || die "scheduler config $SCHEDULER_CONFIG does not exist"
		grep -q '^kind: *KubeSchedulerConfiguration' "$SCHEDULER_CONFIG" ||
			die "$SCHEDULER_CONFIG is not a KubeSchedulerConfiguration (no top-level 'kind: KubeSchedulerConfiguration')"
		# Drop a top-level clientConnection block; ours is appended below.
		awk '
			/^clientConnection:/ { skip = 1; next }
			skip && /^[^ \t#]/ { skip = 0 }
			!skip { print }
		' "$SCHEDULER_CONFIG" >"$out.tmp"
		if [[ -n "$EXTENDER_URL" ]]; then
			grep -q 'urlPrefix:' "$out.tmp" || die "--extender-url given but $SCHEDULER_CONFIG has no extender urlPrefix"
			sed -i "s#^\([[:space:]-]*urlPrefix:\).*#\1 \"${EXTENDER_URL}\"#" "$out.tmp"
		fi
		local profile
		for profile in "${EXTRA_PROFILES[@]}"; do
			grep -q '^profiles:' "$out.tmp" || die "--extra-profile needs a top-level 'profiles:' list in $SCHEDULER_CONFIG"
			grep -q "schedulerName: *${profile}\$" "$out.tmp" && continue
			sed -i "/^profiles:/a\\  - schedulerName: ${profile}" "$out.tmp"
		done
	else
		[[ -z "$EXTENDER_URL" ]] || die "--extender-url needs --scheduler-config (the extender's verbs and managed resources live there)"
		cat >"$out.tmp" <<-EOF
			apiVersion: kubescheduler.config.k8s.io/v1
			kind: KubeSchedulerConfiguration
		EOF
	fi
	if ! grep -q '^leaderElection:' "$out.tmp"; then
		printf 'leaderElection:\n  leaderElect: false\n' >>"$out.tmp"
	fi
	printf 'clientConnection:\n  kubeconfig: %s\n' "$KUBECONFIG_FILE" >>"$out.tmp"
	[[ -z "$SCHEDULER_QPS" ]] || printf '  qps: %s\n' "$SCHEDULER_QPS" >>"$out.tmp"
	[[ -z "$SCHEDULER_BURST" ]] || printf '  burst: %s\n' "$SCHEDULER_BURST" >>"$out.tmp"
	mv "$out.tmp" "$out"
}

# ---- processes --------------------------------------------------------------

# start NAME ARGS... starts the binary in its own session with its output in
# logs/NAME.log and its PID in pids/NAME.pid, unless it already runs.
start() {
	local name="$1"
	shift
	local pid
	if pid="$(pid_of "$name")"; then
		log "$name already running (pid $pid)"
		return
	fi
	[[ -x "$BIN/$name" ]] || die "$BIN/$name is missing: run hack/build-k8s.sh (make cluster-binaries)"
	log "starting $name"
	setsid "$BIN/$name" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$PIDS/$name.pid"
}

# wait_healthy NAME URL [curl args...] polls URL until it answers 200 "ok".
wait_healthy() {
	local name="$1" url="$2"
	shift 2
	local deadline=$((SECONDS + READY_TIMEOUT)) body pid
	pid="$(cat "$PIDS/$name.pid")"
	while ((SECONDS < deadline)); do
		# Not pid_of: just after `start` the child may not have exec'd the
		# binary yet, so its command line is still this script's.
		if ! kill -0 "$pid" 2>/dev/null || [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]]; then
			tail -n 20 "$LOGS/$name.log" >&2 || true
			die "$name exited; log: $LOGS/$name.log"
		fi
		if body="$(curl -fsS --max-time 2 "$@" "$url" 2>/dev/null)" && [[ "$body" == ok ]]; then
			log "$name healthy ($url)"
			return
		fi
		sleep 0.2
	done
	tail -n 20 "$LOGS/$name.log" >&2 || true
	die "$name not healthy within ${READY_TIMEOUT} s ($url); log: $LOGS/$name.log"
}

# port_taken PORT: something listens on 127.0.0.1:PORT.
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# port_holder PORT prints " by PID (COMMAND)" for the listener on PORT when ss can tell.
port_holder() {
	command -v ss >/dev/null || return 0
	ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(("[^"]*",pid=[0-9]*' | head -n1 |
		sed 's/users:(("\([^"]*\)",pid=\([0-9]*\)/ by pid \2 (\1)/'
}

# check_port_free NAME PORT VARIABLE: the port is free, or held by our own NAME.
check_port_free() {
	local name="$1" port="$2" var="$3"
	pid_of "$name" >/dev/null && return
	if port_taken "$port"; then
		die "port 127.0.0.1:$port (for $name) is taken$(port_holder "$port"); set $var to a free port, e.g. $var=$((port + 1))"
	fi
}

# check_ports: every port `up` needs is free (or held by this cluster's own component).
check_ports() {
	check_port_free etcd "$ETCD_PORT" GPUSHARE_ETCD_PORT
	check_port_free etcd "$ETCD_PEER_PORT" GPUSHARE_ETCD_PEER_PORT
	check_port_free kube-apiserver "$APISERVER_PORT" GPUSHARE_APISERVER_PORT
	check_port_free kube-controller-manager "$KCM_PORT" GPUSHARE_KCM_PORT
	[[ "$START_SCHEDULER" == 0 ]] || check_port_free kube-scheduler "$SCHEDULER_PORT" GPUSHARE_SCHEDULER_PORT
}

cmd_up() {
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--scheduler-config)
			SCHEDULER_CONFIG="${2:?--scheduler-config needs a file}"
			shift
			;;
		--extender-url)
			EXTENDER_URL="${2:?--extender-url needs a URL}"
			shift
			;;
		--extra-profile)
			EXTRA_PROFILES+=("${2:?--extra-profile needs a scheduler name}")
			shift
			;;
		*) die "up: unknown argument $1" ;;
		esac
		shift
	done
	command -v openssl >/dev/null || die "openssl is needed to make certificates"
	command -v curl >/dev/null || die "curl is needed to poll health endpoints"
	mkdir -p "$STATE" "$PIDS" "$LOGS"
	# Whatever makes `up` stop early (a failed check, an error, a signal)
	# stops the whole cluster: no half-started control plane is left behind.
	UP_DONE=0
	trap 'if [[ $UP_DONE == 0 ]]; then log "up did not finish: stopping the cluster"; cmd_down; fi' EXIT
	trap 'exit 130' INT TERM

	check_ports

	gen_certs
	write_kubeconfig

	start etcd --name gpushare --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:${ETCD_PORT}" \
		--advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
		--listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-cluster "gpushare=http://127.0.0.1:${ETCD_PEER_PORT}" \
		--listen-metrics-urls "" --log-level warn
	wait_healthy etcd "http://127.0.0.1:${ETCD_PORT}/health" -o /dev/null -w ok

	local authz=(--authorization-mode=Node,RBAC)
	if [[ -n "${GPUSHARE_AUTHORIZATION_CONFIG:-}" ]]; then
		authz=(--authorization-config="$GPUSHARE_AUTHORIZATION_CONFIG")
	fi
	local listen=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
	if [[ -n "$APISERVER_ADDRESS" ]]; then
		listen=(--bind-address=0.0.0.0 --advertise-address="$APISERVER_ADDRESS" --endpoint-reconciler-type=lease)
	fi
	start kube-apiserver "${listen[@]}" \
		--secure-port="${APISERVER_PORT}" \
		--etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		"${authz[@]}" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" \
		--service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 \
		--allow-privileged=true --profiling="${PROFILING}"
	wait_healthy kube-apiserver "https://127.0.0.1:${APISERVER_PORT}/readyz" \
		--cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key"

	start kube-controller-manager --kubeconfig="$KUBECONFIG_FILE" \
		--authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
		--bind-address=127.0.0.1 --secure-port="${KCM_PORT}" \
		--controllers="${KCM_CONTROLLERS}" --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=false --profiling="${PROFILING}"
	wait_healthy kube-controller-manager "https://127.0.0.1:${KCM_PORT}/healthz" --cacert "$PKI/ca.crt" -k

	if [[ "$START_SCHEDULER" != 0 ]]; then
		write_scheduler_config
		start kube-scheduler --config="$STATE/kube-scheduler-config.yaml" \
			--authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
			--bind-address=127.0.0.1 --secure-port="${SCHEDULER_PORT}" --profiling="${PROFILING}"
		wait_healthy kube-scheduler "https://127.0.0.1:${SCHEDULER_PORT}/healthz" -k
	fi
	UP_DONE=1
	log "cluster up; export KUBECONFIG=$KUBECONFIG_FILE (state: $STATE)"
}

cmd_status() {
	local c pid rc=0
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
		if pid="$(pid_of "$c")"; then
			printf '%-24s running (pid %s)  log %s\n' "$c" "$pid" "$LOGS/$c.log"
		else
			printf '%-24s stopped\n' "$c"
			rc=1
		fi
	done
	echo "KUBECONFIG=$KUBECONFIG_FILE"
	return $rc
}

main() {
	local cmd="${1:-}"
	[[ $# -gt 0 ]] && shift
	case "$cmd" in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	stop)
		[[ $# -eq 1 ]] || die "stop takes one component: ${COMPONENTS[*]}"
		case " ${COMPONENTS[*]} " in *" $1 "*) ;; *) die "unknown component $1" ;; esac
		mkdir -p "$PIDS"
		stop_one "$1"
		;;
	status) cmd_status ;;
	check-ports) check_ports ;;
	env) echo "export KUBECONFIG=$KUBECONFIG_FILE" ;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
