#!/usr/bin/env bash
# Builds the Kueue controller (sigs.k8s.io/kueue/cmd/kueue, hack/kueue-version) from the Go module
# proxy and copies its CustomResourceDefinitions (the module's config/components/crd/bases)
# into a cache outside the repository, keyed by version:
#   ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/kueue-VERSION/{bin/kueue,crd/*.yaml}
# The e2e harness (test/cluster) starts it for the Kueue test. Present already: skipped.
# A cold build takes ~9 CPU-minutes (about 5 min on 2 idle cores; it prints every 30 s while it builds).
#
# Usage: hack/build-kueue.sh
# Env:   GPUSHARE_CACHE  cache root (default $HOME/.cache/gpushare)
#        KUEUE_VERSION   sigs.k8s.io/kueue tag (default: hack/kueue-version)
#        GO              go command (default go)
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-$(cat "$(dirname "${BASH_SOURCE[0]}")/kueue-version")}"
GO="${GO:-go}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
DIR="${CACHE}/kueue-${KUEUE_VERSION}"

log() { printf '%s build-kueue: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

mkdir -p "$DIR/bin" "$DIR/crd"
exec 9>"$DIR/.lock"
flock 9
if [[ -x "$DIR/bin/kueue" && -f "$DIR/crd/.ready" ]]; then
	log "kueue ${KUEUE_VERSION}: present in $DIR, skipped"
	exit 0
fi

t0=$(date +%s)
src="$("$GO" mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')" || true
if [[ -z "$src" || ! -d "$src/config/components/crd/bases" ]]; then
	log "could not download sigs.k8s.io/kueue@${KUEUE_VERSION} from the module proxy (GOPROXY=$("$GO" env GOPROXY))"
	exit 1
fi
cp "$src"/config/components/crd/bases/*.yaml "$DIR/crd/"
chmod u+w "$DIR"/crd/*.yaml
touch "$DIR/crd/.ready"

if [[ ! -x "$DIR/bin/kueue" ]]; then
	log "kueue ${KUEUE_VERSION}: building"
	(
		trap 'kill "$nap" 2>/dev/null; exit 0' TERM
		while :; do
			sleep 30 &
			nap=$!
			wait "$nap"
			log "kueue: still building, $(($(date +%s) - t0)) s so far"
		done
	) &
	ticker=$!
	trap 'kill "$ticker" 2>/dev/null; true' EXIT
	# sigs.k8s.io/kueue's go.mod has no replace directives, so `go install pkg@version` builds
	# it with exactly the versions it pins.
	GOBIN="$DIR/bin.tmp" CGO_ENABLED=0 "$GO" install -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}" \
		"sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}"
	mv "$DIR/bin.tmp/kueue" "$DIR/bin/kueue"
	rmdir "$DIR/bin.tmp"
	kill "$ticker" 2>/dev/null || true
fi
log "done in $(($(date +%s) - t0)) s: $DIR"
