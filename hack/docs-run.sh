#!/usr/bin/env bash
# docs-run: runs the commands README.md and docs/*.md give on a playground of its own, and fails
# with the doc's file:line when one does not do what its doc says (hack/docsrun; part of `make
# test`). The playground is brought up fresh on its own state dir and ports, so that it never
# touches the default one (make playground), and taken down (state deleted) at the end.
#
# Env: DOCS_RUN_PLAYGROUND (state dir, default /tmp/gpushare-docs-run) and its ports, each one off
#      the default playground's: GPUSHARE_ETCD_PORT=25790 GPUSHARE_ETCD_PEER_PORT=25800
#      GPUSHARE_APISERVER_PORT=18443 GPUSHARE_KCM_PORT=22257 GPUSHARE_SCHEDULER_PORT=22259
#      GPUSHARE_EXTENDER_PORT=31766 GPUSHARE_NODE_SCOPE_PORT=31767;
#      DOCS_RUN_KEEP=1 leaves the playground running at the end (to look at a failure).
# Arguments go to hack/docsrun (e.g. -v, or the doc files to run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

export GPUSHARE_PLAYGROUND="${DOCS_RUN_PLAYGROUND:-/tmp/gpushare-docs-run}"
[[ "$(realpath -m "$GPUSHARE_PLAYGROUND")" != /tmp/gpushare-playground ]] ||
	{ echo "docs-run: DOCS_RUN_PLAYGROUND is the default playground's state dir: pick another" >&2; exit 2; }
export GPUSHARE_ETCD_PORT="${GPUSHARE_ETCD_PORT:-25790}" GPUSHARE_ETCD_PEER_PORT="${GPUSHARE_ETCD_PEER_PORT:-25800}"
export GPUSHARE_APISERVER_PORT="${GPUSHARE_APISERVER_PORT:-18443}" GPUSHARE_KCM_PORT="${GPUSHARE_KCM_PORT:-22257}"
export GPUSHARE_SCHEDULER_PORT="${GPUSHARE_SCHEDULER_PORT:-22259}" GPUSHARE_EXTENDER_PORT="${GPUSHARE_EXTENDER_PORT:-31766}"
export GPUSHARE_NODE_SCOPE_PORT="${GPUSHARE_NODE_SCOPE_PORT:-31767}"
unset GPUSHARE_PLAYGROUND_KEEP GPUSHARE_PLAYGROUND_NODE_SCOPE

# The labels and directives first: no playground for a doc that cannot be run.
go run ./hack/docsrun -check

start=$SECONDS
down() {
	if [[ "${DOCS_RUN_KEEP:-0}" == 1 ]]; then
		echo "docs-run: the playground keeps running (DOCS_RUN_KEEP=1): GPUSHARE_PLAYGROUND=$GPUSHARE_PLAYGROUND hack/playground.sh down --clean stops it" >&2
	else
		hack/playground.sh down --clean >/dev/null 2>&1 || echo "docs-run: could not take the playground down: GPUSHARE_PLAYGROUND=$GPUSHARE_PLAYGROUND hack/playground.sh down --clean" >&2
	fi
}
trap down EXIT
# What README.md's first command does (make playground), on this state dir and these ports.
if ! make --no-print-directory playground >"$ROOT/bin/docs-run-playground.log" 2>&1; then
	tail -n 30 "$ROOT/bin/docs-run-playground.log" >&2
	echo "docs-run: the playground did not come up (log: bin/docs-run-playground.log)" >&2
	exit 1
fi
up=$((SECONDS - start))

K8S_BIN="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-$(cat hack/k8s-version)/bin"
export KUBECONFIG="$GPUSHARE_PLAYGROUND/kubeconfig"
export PATH="$ROOT/bin:$K8S_BIN:$(dirname "$(hack/tools.sh helm)"):$PATH"
go build -o "$ROOT/bin/docsrun" ./hack/docsrun
rc=0
"$ROOT/bin/docsrun" "$@" || rc=$?
echo "docs-run: $((SECONDS - start)) s (the playground up in $up s)"
exit "$rc"
