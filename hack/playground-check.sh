#!/usr/bin/env bash
# Checks of hack/playground.sh that need no cluster (make playground-check; part of make test):
#   - a taken port stops `up` at once, before anything is built, naming the GPUSHARE_*_PORT to set;
#   - `up` starts fresh by default (the old state is deleted), keeps the state with
#     GPUSHARE_PLAYGROUND_KEEP=1, and never deletes a directory that is not a playground's;
#   - `down` stops an extender started by hand by a relative path (relative kubeconfig too, or
#     one given by GPUSHARE_KUBECONFIG, or one of its ServiceAccount kubeconfigs in identities/),
#     and leaves another playground's extender alone;
#   - it runs the shipped configuration: the chart installed with helm (admission and record signing
#     not turned off), the extender and each plugin with their record keys and as the chart's
#     ServiceAccounts (the plugin's token bound to its Node) and each plugin reading with its node's
#     own identity, names that the chart's rendering has.
# Port holders and hand-started extenders are the real bin/gpushare-scheduler pointed at an
# unreachable API server. The `up` checks need root (up refuses to run without it).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

T="$(mktemp -d)"
# Every process this script starts is listed in $T/held and killed at the end.
cleanup() {
	local p
	for p in $(cat "$T/held" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1: $2"; }

go build -o bin/gpushare-scheduler ./scheduler

taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		taken "$p" || { echo "$p"; return; }
	done
}
# kubeconfig FILE: a kubeconfig for an API server that is not there.
kubeconfig() {
	mkdir -p "$(dirname "$1")"
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF
}
# extender DIR ARGS... starts bin/gpushare-scheduler from DIR by a path relative to DIR (ARGS as
# given; environment from the caller) and prints its PID once that process runs the binary.
extender() {
	local dir="$1" rel
	shift
	rel="$(realpath --relative-to="$dir" "$ROOT/bin/gpushare-scheduler")"
	[[ "$rel" == */* ]] || rel="./$rel"
	(cd "$dir" && exec setsid "$rel" "$@" >>"$T/extenders.log" 2>&1 </dev/null) &
	local pid=$!
	echo "$pid" >>"$T/held"
	local i
	for ((i = 0; i < 100; i++)); do
		[[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$(realpath "$ROOT/bin/gpushare-scheduler")" ]] && break
		sleep 0.05
	done
	echo "$pid"
}
running() { [[ -d "/proc/$1" && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
gone() {
	local i
	for ((i = 0; i < 100; i++)); do running "$1" || return 0; sleep 0.1; done
	return 1
}

# The playground's environment for these checks: its own state dir and free ports.
PG="$T/pg"
export GPUSHARE_PLAYGROUND="$PG"
export GPUSHARE_ETCD_PORT GPUSHARE_ETCD_PEER_PORT GPUSHARE_APISERVER_PORT GPUSHARE_KCM_PORT GPUSHARE_SCHEDULER_PORT GPUSHARE_EXTENDER_PORT
GPUSHARE_ETCD_PORT=$(free_port) GPUSHARE_ETCD_PEER_PORT=$(free_port) GPUSHARE_APISERVER_PORT=$(free_port)
GPUSHARE_KCM_PORT=$(free_port) GPUSHARE_SCHEDULER_PORT=$(free_port) GPUSHARE_EXTENDER_PORT=$(free_port)
kubeconfig "$T/other/kubeconfig"

# hold VAR: another program takes the port VAR names.
hold() {
	local pid
	pid="$(extender "$T" --kubeconfig "$T/other/kubeconfig" --listen "127.0.0.1:${!1}")"
	local i
	for ((i = 0; i < 100; i++)); do taken "${!1}" && break; sleep 0.05; done
	echo "$pid"
}

# up_fails NAME WANT [ENV...]: `up` fails within 30 s, says WANT, and built nothing.
up_fails() {
	local name="$1" want="$2" code=0 start=$SECONDS
	shift 2
	env "$@" timeout 120 hack/playground.sh up >"$T/$name.out" 2>&1 || code=$?
	if [[ $code -eq 0 ]]; then fail "$name" "up succeeded"; return; fi
	if ((SECONDS - start > 30)); then fail "$name" "up took $((SECONDS - start)) s to fail"; return; fi
	if grep -q building "$T/$name.out"; then fail "$name" "up built before it failed: $(cat "$T/$name.out")"; return; fi
	if grep -qF -- "$want" "$T/$name.out"; then pass "$name ($((SECONDS - start)) s)"; else fail "$name" "no '$want' in: $(cat "$T/$name.out")"; fi
}

if [[ "$(id -u)" == 0 ]]; then
	h="$(hold GPUSHARE_APISERVER_PORT)"
	up_fails "a taken kube-apiserver port fails before building" "set GPUSHARE_APISERVER_PORT to a free port"
	kill "$h"; gone "$h" || true

	h="$(hold GPUSHARE_EXTENDER_PORT)"
	up_fails "a taken extender port fails before building" "set GPUSHARE_EXTENDER_PORT to a free port"

	# Fresh by default: the last playground's state is deleted (up then stops at the port).
	mkdir -p "$PG/pids" && touch "$PG/.gpushare-playground" "$PG/old-etcd-data"
	up_fails "fresh up (port still taken)" "starting a fresh playground" GPUSHARE_PLAYGROUND_KEEP=0
	if [[ -e "$PG/old-etcd-data" ]]; then fail "fresh by default" "the old state survived"; else pass "fresh by default deletes the old state"; fi
	mkdir -p "$PG/pids" && touch "$PG/.gpushare-playground" "$PG/old-etcd-data"
	up_fails "KEEP=1 up (port still taken)" "resuming the last playground" GPUSHARE_PLAYGROUND_KEEP=1
	if [[ -e "$PG/old-etcd-data" ]]; then pass "KEEP=1 keeps the old state"; else fail "KEEP=1" "the old state was deleted"; fi

	# (The extender port stays taken: should the refusal break, up still stops before building.)
	mkdir -p "$T/foreign" && touch "$T/foreign/precious"
	up_fails "a directory that is not a playground's is not deleted" "is not a playground's state dir" GPUSHARE_PLAYGROUND="$T/foreign"
	if [[ -e "$T/foreign/precious" ]]; then pass "the foreign directory is intact"; else fail "foreign directory" "deleted"; fi
	kill "$h"; gone "$h" || true
else
	echo "skip the up checks: not root"
fi

# down finds extenders of this playground however they were started.
rm -rf "$PG"
mkdir -p "$PG/pids"
kubeconfig "$PG/kubeconfig"
a="$(extender "$ROOT/bin" --kubeconfig "$(realpath --relative-to="$ROOT/bin" "$PG/kubeconfig")" --listen 127.0.0.1:0)"
b="$(cd "$PG" && GPUSHARE_KUBECONFIG=kubeconfig extender "$PG" --listen 127.0.0.1:0)"
c="$(extender "$ROOT" --kubeconfig "$T/other/kubeconfig" --listen 127.0.0.1:0)"
kubeconfig "$PG/identities/extender.kubeconfig"
d="$(extender "$ROOT" --kubeconfig "$PG/identities/extender.kubeconfig" --listen 127.0.0.1:0)"
running "$a" && running "$b" && running "$c" && running "$d" || fail "hand-started extenders" "did not start: $(cat "$T/extenders.log")"
hack/playground.sh down >"$T/down.out" 2>&1 || fail "down" "$(cat "$T/down.out")"
if gone "$a"; then pass "down stops an extender started as bin/... with a relative --kubeconfig"; else fail "down" "extender $a (relative paths) still runs: $(cat "$T/down.out")"; fi
if gone "$b"; then pass "down stops an extender given GPUSHARE_KUBECONFIG=kubeconfig"; else fail "down" "extender $b (GPUSHARE_KUBECONFIG) still runs: $(cat "$T/down.out")"; fi
if gone "$d"; then pass "down stops an extender running as the chart's ServiceAccount (identities/)"; else fail "down" "extender $d (identities/ kubeconfig) still runs: $(cat "$T/down.out")"; fi
if running "$c"; then pass "down leaves another playground's extender alone"; else fail "down" "stopped extender $c of another kubeconfig"; fi

# The shipped configuration (read from the script: the cluster is not started here).
# joined: the script with backslash-continued lines joined into one.
joined="$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' hack/playground.sh)"
# has NAME PATTERN [TEXT]: TEXT (default: the script) has a line matching the extended regexp PATTERN.
has() {
	if grep -qE -- "$2" <<<"${3:-$joined}"; then pass "$1"; else fail "$1" "no line of hack/playground.sh matches: $2"; fi
}
has "up installs the chart with helm" 'upgrade --install .*charts/gpushare'
if grep -qE -- '(admission|recordSigning)\.enabled=false' <<<"$joined"; then
	fail "the chart's policies and record signing stay on" "hack/playground.sh turns admission or recordSigning off"
else pass "the chart's policies and record signing stay on"; fi
extender_line="$(grep -E 'gpushare-scheduler" --kubeconfig' <<<"$joined" || true)"
has "the extender gets the record key (--record-key-dir)" '--record-key-dir' "$extender_line"
has "the extender reads its configuration file" '--config "\$STATE/extender-config.yaml"' "$extender_line"
has "the extender publishes the largest card for the request-size policy" '^[[:space:]]*cardLimitsConfigMap: '
has "the extender publishes the record keys' public halves" '^[[:space:]]*recordPublicKeyConfigMap: '
has "the extender runs as the chart's ServiceAccount (identities/, not the admin kubeconfig)" '--kubeconfig "\$IDENTITIES/' "$extender_line"
plugin_line="$(grep -E -- '--plugin "\$BIN/gpushare-device-plugin"' <<<"$joined" || true)"
has "each plugin reads its configuration file" '[[:space:]]-- .*--config "\$STATE/nodes/\$name/device-plugin-config.yaml"' "$plugin_line"
has "each plugin's configuration names the record key directory" 'recordKeyDir: %s'
has "each plugin runs as the chart's ServiceAccount" '--plugin-env "KUBECONFIG=\$IDENTITIES/' "$plugin_line"
has "the plugin's token is bound to its Node (the node name the policies check)" '--bound-object-kind Node'
has "each plugin reads with its node's own identity (--node-kubeconfig)" '[[:space:]]-- .*read_args.*"\$IDENTITIES/node-\$name.kubeconfig"' "$plugin_line"
has "the plugins' reads are --node-kubeconfig by default" 'read_args=\(--node-kubeconfig\)'
has "the node identity is system:node:NODE in group system:nodes" '-subj "/O=system:nodes/CN=system:node:\$n"'
has "NODE_SCOPE=1: the chart's node-scope webhook on, the plugins' node identity off" 'scope=\(--set nodeScope.enabled=true --set devicePlugin.nodeCredential.kubeconfig=$'
has "NODE_SCOPE=1: the extender serves the webhook for the plugin's ServiceAccount" 'scope_args=\(--node-scope-listen .*--node-scoped-users "system:serviceaccount:\$NAMESPACE:\$RELEASE-device-plugin"'
has "NODE_SCOPE=1: kube-apiserver asks Node first" 'AuthorizationConfiguration.{2}authorizers:.{2}- type: Node.{2}  name: node'
has "NODE_SCOPE=1: then the chart's entry" 'jsonpath=\{.data.authorizer\\.yaml\}'
has "NODE_SCOPE=1: make playground passes it" 'GPUSHARE_PLAYGROUND_NODE_SCOPE=\$\(NODE_SCOPE\)' "$(cat Makefile)"
# The names the script uses are the chart's for its release and namespace.
release="$(sed -n 's/^RELEASE=//p' hack/playground.sh)" namespace="$(sed -n 's/^NAMESPACE=//p' hack/playground.sh)"
if [[ -z "$release" || -z "$namespace" ]]; then
	fail "the chart's names" "hack/playground.sh sets no RELEASE= or NAMESPACE="
else
	rendered="$("$(hack/tools.sh helm)" template "$release" charts/gpushare --namespace "$namespace" \
		--kube-version "$(cat hack/k8s-version)" 2>&1)" || fail "helm template" "$rendered"
	for want in "kind: ServiceAccount@name: $release-scheduler" "kind: ServiceAccount@name: $release-device-plugin" \
		"kind: Secret@name: $release-record-key" "kind: ConfigMap@name: $release-card-limits" \
		"kind: ValidatingAdmissionPolicy@system:serviceaccount:$namespace:$release-device-plugin" \
		"kind: ValidatingAdmissionPolicy@system:serviceaccount:$namespace:$release-scheduler"; do
		if awk -v k="${want%@*}" -v n="${want#*@}" '/^---/{d=""} {d=d"\n"$0} index(d,k) && index(d,n){f=1} END{exit !f}' <<<"$rendered"; then
			pass "the chart renders ${want/@/ with }"
		else fail "the chart's names" "no ${want%@*} with ${want#*@} in helm template $release -n $namespace"; fi
	done
fi

echo "playground-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
