#!/usr/bin/env bash
# Prints the path of a pinned tool, building it from the Go module proxy into a cache outside the
# repository the first time (keyed by version). Usage: hack/tools.sh helm
set -euo pipefail

cache="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/tools"
HELM_VERSION=v3.22.0

case "${1:-}" in
  helm)
    bin="$cache/helm-$HELM_VERSION/helm"
    if [ ! -x "$bin" ]; then
      echo "building helm $HELM_VERSION into $bin (about 2 minutes, once)" >&2
      mkdir -p "$(dirname "$bin")"
      (cd / && GOBIN="$(dirname "$bin")" CGO_ENABLED=0 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
    fi
    echo "$bin"
    ;;
  *)
    echo "usage: $0 helm" >&2
    exit 2
    ;;
esac
