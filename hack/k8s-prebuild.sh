#!/usr/bin/env bash
# Builds the Kubernetes binaries `make test` needs later in the background, at the lowest CPU and
# I/O priority: the control plane, kubelet and kube-proxy of K8S_VERSION, the Kueue controller
# (hack/build-kueue.sh), then the control plane and kubelet of OLDEST_K8S_VERSION (hack/build-k8s.sh).
# They use the CPU the Go checks leave idle (downloads, single-threaded links, test runs), and the
# oldest version builds while the e2e suite, mostly waiting on its clusters, runs at full priority. Each build holds its version's
# lock: the foreground's hack/build-k8s.sh (make cluster-binaries, container-lane) waits for it
# and then skips what it built; anything the background did not build (it failed, or was stopped)
# the foreground builds itself, so the background only ever saves time.
#
# Usage: hack/k8s-prebuild.sh start   start it unless it runs or everything is built (make test does)
#        hack/k8s-prebuild.sh stop    stop it (a run of make test that stopped early leaves it going)
# Log:   bin/k8s-prebuild.log; pid in bin/k8s-prebuild.pid
# Env:   K8S_VERSION, OLDEST_K8S_VERSION, GPUSHARE_CACHE, GO (as hack/build-k8s.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION="${K8S_VERSION:-$(cat hack/k8s-version)}"
OLDEST_K8S_VERSION="${OLDEST_K8S_VERSION:-}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
LOG=bin/k8s-prebuild.log
PIDFILE=bin/k8s-prebuild.pid
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy)
# The oldest version runs no install lane: no kube-proxy.
OLDEST_BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet)

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

built() {
	local b
	for b in "${BINARIES[@]}"; do
		[[ -x "$CACHE/k8s-$K8S_VERSION/bin/$b" ]] || return 1
	done
	for b in "${OLDEST_BINARIES[@]}"; do
		[[ -x "$CACHE/k8s-$OLDEST_K8S_VERSION/bin/$b" ]] || return 1
	done
	[[ -x "$CACHE/kueue-$(cat hack/kueue-version)/bin/kueue" ]]
}

case "${1:-}" in
start)
	[[ -n $OLDEST_K8S_VERSION ]] || { echo "k8s-prebuild: OLDEST_K8S_VERSION is not set (make k8s-prebuild sets it)" >&2; exit 2; }
	mkdir -p bin
	if running; then
		echo "k8s-prebuild: already running (pid $(cat "$PIDFILE"), log $LOG)"
		exit 0
	fi
	if built; then
		echo "k8s-prebuild: Kubernetes $K8S_VERSION and $OLDEST_K8S_VERSION binaries and Kueue present, nothing to build"
		exit 0
	fi
	low=(nice -n 19)
	command -v ionice >/dev/null && low+=(ionice -c 3)
	# setsid: its own process group, so that stop ends the builds it started too. A new session is
	# also a new scheduler autogroup, where nice alone would not lower it against make's session: the
	# group's own nice is set too (/proc/self/autogroup; absent without CONFIG_SCHED_AUTOGROUP).
	setsid "${low[@]}" bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null
		K8S_VERSION=$1 hack/build-k8s.sh $3 && hack/build-kueue.sh && K8S_VERSION=$2 hack/build-k8s.sh $4' \
		prebuild "$K8S_VERSION" "$OLDEST_K8S_VERSION" "${BINARIES[*]}" "${OLDEST_BINARIES[*]}" >"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	echo "k8s-prebuild: building Kubernetes $K8S_VERSION, Kueue, then $OLDEST_K8S_VERSION, in the background (nice 19; log $LOG, pid $!)"
	;;
stop)
	if running; then
		kill -- "-$(cat "$PIDFILE")" 2>/dev/null || kill "$(cat "$PIDFILE")"
		echo "k8s-prebuild: stopped"
	fi
	rm -f "$PIDFILE"
	;;
*)
	echo "usage: hack/k8s-prebuild.sh start|stop" >&2
	exit 2
	;;
esac
