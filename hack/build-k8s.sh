#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy into a
# cache outside the repository, keyed by version:
#   etcd (v3.6.16), kube-apiserver, kube-scheduler, kube-controller-manager and
#   kubectl (k8s.io/kubernetes, the version in hack/k8s-version); on request also the kubelet and kube-proxy (for the
#   e2e container lane: hack/container-lane.sh runs `hack/build-k8s.sh kubelet`)
# into ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-VERSION/bin.
# A binary already present is skipped, so running it again costs nothing.
# A cold build takes ~7 minutes on 2 idle cores (kube-apiserver alone ~3 minutes), several times
# that on a loaded machine; it prints a line per binary and every 30 s while one builds.
#
# Usage: hack/build-k8s.sh [binary...]   (default: all of them)
# Env:   GPUSHARE_CACHE   cache root (default $HOME/.cache/gpushare)
#        K8S_VERSION      k8s.io/kubernetes tag (default: hack/k8s-version)
#        ETCD_VERSION     etcd tag (default v3.6.16)
#        GO               go command (default go)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-$(cat "$(dirname "${BASH_SOURCE[0]}")/k8s-version")}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
GO="${GO:-go}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${CACHE}/k8s-${K8S_VERSION}/bin"
# Staging modules are published as v0.<minor>.<patch> for k8s v1.<minor>.<patch>.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

ALL=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl)
if [[ $# -gt 0 ]]; then
	WANT=("$@")
else
	WANT=("${ALL[@]}")
fi

log() { printf '%s build-k8s: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

mkdir -p "$BIN"
# One build per version at a time: `make test` starts one in the background (hack/k8s-prebuild.sh);
# another waits for it here and then skips what it built.
exec 9>"$BIN/.lock"
if ! flock -n 9; then
	log "another build is writing $BIN (make test's background build logs to bin/k8s-prebuild.log): waiting for it"
	flock 9
	log "the other build is done"
fi
missing=()
for b in "${WANT[@]}"; do
	case "$b" in
	etcd | kube-apiserver | kube-scheduler | kube-controller-manager | kubectl | kubelet | kube-proxy) ;;
	*)
		log "unknown binary '$b' (known: ${ALL[*]} kubelet kube-proxy)"
		exit 2
		;;
	esac
	if [[ -x "$BIN/$b" ]]; then
		log "$b: present in $BIN, skipped"
	else
		missing+=("$b")
	fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
	log "all present in $BIN"
	exit 0
fi

# Throwaway wrapper modules live in the cache, never in the repository.
WORK="${CACHE}/k8s-${K8S_VERSION}/work"
mkdir -p "$WORK"

build_etcd() {
	local dir="$WORK/etcd-${ETCD_VERSION}"
	mkdir -p "$dir"
	if [[ ! -f "$dir/go.mod" ]]; then
		# etcd's own go.mod has replace directives, so `go install` refuses it;
		# a wrapper module that requires the server module works.
		(cd "$dir" && "$GO" mod init gpushare.local/etcdwrapper >/dev/null 2>&1)
	fi
	(cd "$dir" && "$GO" get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" "go.etcd.io/etcd/etcdctl/v3@${ETCD_VERSION}")
	(cd "$dir" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$BIN/etcd.tmp" "$BIN/etcd"
}

# k8s.io/kubernetes replaces its staging modules with ./staging/...; a wrapper
# module pins each of them to the published version instead.
k8s_wrapper() {
	local dir="$WORK/kubernetes"
	if [[ -f "$dir/.ready" ]]; then
		return
	fi
	mkdir -p "$dir"
	local gomod
	gomod="$("$GO" mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
	if [[ -z "$gomod" || ! -f "$gomod" ]]; then
		log "could not download k8s.io/kubernetes@${K8S_VERSION}"
		return 1
	fi
	{
		echo "module gpushare.local/k8swrapper"
		echo
		echo "go 1.24.0"
		echo
		echo "require k8s.io/kubernetes ${K8S_VERSION}"
		echo
		echo "replace ("
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod" | sort -u |
			while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
		echo ")"
	} >"$dir/go.mod"
	(cd "$dir" && "$GO" get "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}" \
		"k8s.io/kubernetes/cmd/kube-scheduler@${K8S_VERSION}" \
		"k8s.io/kubernetes/cmd/kube-controller-manager@${K8S_VERSION}" \
		"k8s.io/kubernetes/cmd/kubectl@${K8S_VERSION}")
	touch "$dir/.ready"
}

build_k8s() {
	local name="$1"
	k8s_wrapper
	if [[ "$name" == kubelet || "$name" == kube-proxy ]]; then
		# Not in the wrapper's first `go get` (wrappers made before the
		# kubelet was needed): add its dependencies, pinned.
		(cd "$WORK/kubernetes" && "$GO" get "k8s.io/kubernetes/cmd/${name}@${K8S_VERSION}")
	fi
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	local ldflags="-s -w"
	ldflags+=" -X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
	ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor}"
	ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
	(cd "$WORK/kubernetes" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ldflags" \
		-o "$BIN/${name}.tmp" "k8s.io/kubernetes/cmd/${name}")
	mv "$BIN/${name}.tmp" "$BIN/${name}"
}

# Progress: one line per binary as it starts and ends ("[2/5] kube-apiserver"), and every 30 s
# while it builds, with the time so far (go build itself prints nothing for minutes).
total=${#missing[@]}
t0=$(date +%s)
i=0
ticker=
trap '[[ -n $ticker ]] && kill "$ticker" 2>/dev/null; true' EXIT
for b in "${missing[@]}"; do
	i=$((i + 1))
	start=$(date +%s)
	log "[$i/$total] $b: building"
	(
		trap 'kill "$nap" 2>/dev/null; exit 0' TERM
		while :; do
			sleep 30 &
			nap=$!
			wait "$nap"
			now=$(date +%s)
			log "[$i/$total] $b: still building, $((now - start)) s so far ($((now - t0)) s since the first binary)"
		done
	) &
	ticker=$!
	if [[ "$b" == etcd ]]; then
		build_etcd
	else
		build_k8s "$b"
	fi
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	ticker=
	log "[$i/$total] $b: built in $(($(date +%s) - start)) s -> $BIN/$b"
done
log "done: $total built in $(($(date +%s) - t0)) s, in $BIN"
