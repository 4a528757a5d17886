#!/usr/bin/env bash
# make image: the gpushare image (gpushare-scheduler, gpushare-device-plugin,
# kubectl-inspect-gpushare on Debian's glibc) for every platform of PLATFORMS, without a container
# engine: binaries built with the Go toolchain (the device plugin with cgo, cross-compiled with
# Debian's gcc-aarch64-linux-gnu), the base layer from the pinned Debian packages of
# hack/image/debian.lock, assembled with go-containerregistry (hack/image) into one OCI archive.
#
#   hack/image.sh              build (IMAGE, PLATFORMS, IMAGE_OUT, PUSH, IMAGE_REVISION: the
#                              revision label, default the commit, from the environment)
#   hack/image.sh update-base  rewrite hack/image/debian.lock from apt's current candidates
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${GPUSHARE_CACHE:-$HOME/.cache/gpushare}
DEBS="$CACHE/debs"
LOCK=hack/image/debian.lock
OUT=${IMAGE_OUT:-bin/image}
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/gpushare/Chart.yaml)
IMAGE=${IMAGE:-ghcr.io/gpushare/gpushare:$APP_VERSION}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
PUSH=${PUSH:-}
GO=${GO:-go}
HOST_ARCH=$($GO env GOHOSTARCH)

die() { echo "image: $*" >&2; exit 1; }

# apt_ready ARCH: apt knows ARCH's packages (adds the architecture and updates the lists once).
apt_ready() {
	local arch=$1
	if [ "$arch" != "$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
		[ "$(id -u)" = 0 ] || die "Debian's $arch packages need 'dpkg --add-architecture $arch && apt-get update' (root)"
		dpkg --add-architecture "$arch"
		apt-get update -qq
	fi
}

if [ "${1:-}" = update-base ]; then
	tmp=$(mktemp)
	grep '^#' "$LOCK" >"$tmp"
	grep -v '^#' "$LOCK" | while read -r pkg arch _ _; do
		apt_ready "$arch"
		ver=$(apt-cache policy "$pkg:$arch" | sed -n 's/^ *Candidate: //p')
		[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "apt has no candidate for $pkg:$arch (run apt-get update)"
		mkdir -p "$DEBS"
		(cd "$DEBS" && apt-get download -qq "$pkg:$arch=$ver" 2>/dev/null)
		sum=$(sha256sum "$DEBS/${pkg}_${ver//:/%3a}_${arch}.deb" | cut -d' ' -f1)
		echo "$pkg $arch $ver $sum"
	done >>"$tmp"
	mv "$tmp" "$LOCK"
	echo "image: $LOCK now pins:"; grep -v '^#' "$LOCK"
	exit 0
fi

# base_tar ARCH OUT: the files of the pinned libc6 for ARCH as a tar.
base_tar() {
	local arch=$1 out=$2 line pkg ver sum deb
	line=$(grep -v '^#' "$LOCK" | awk -v a="$arch" '$2 == a' | head -1)
	[ -n "$line" ] || die "$LOCK pins no package for $arch (add one with 'make image-base-update')"
	read -r pkg _ ver sum <<<"$line"
	deb="$DEBS/${pkg}_${ver//:/%3a}_${arch}.deb"
	if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$sum" ]; then
		apt_ready "$arch"
		mkdir -p "$DEBS"
		rm -f "$deb"
		(cd "$DEBS" && apt-get download -qq "$pkg:$arch=$ver" 2>/dev/null) ||
			die "apt cannot download $pkg:$arch=$ver (Debian no longer serves it?): run 'make image-base-update' and commit $LOCK"
		got=$(sha256sum "$deb" | cut -d' ' -f1)
		[ "$got" = "$sum" ] || die "$deb: sha256 $got, $LOCK pins $sum"
	fi
	dpkg-deb --fsys-tarfile "$deb" >"$out"
}

# cc ARCH: the C compiler for ARCH's cgo (installs Debian's cross compiler when missing, root).
cc_for() {
	local arch=$1 triplet
	if [ "$arch" = "$HOST_ARCH" ]; then echo "${CC:-gcc}"; return; fi
	case "$arch" in
	arm64) triplet=aarch64-linux-gnu ;;
	amd64) triplet=x86-64-linux-gnu ;;
	*) die "no cross compiler known for $arch" ;;
	esac
	if ! command -v "$triplet-gcc" >/dev/null; then
		[ "$(id -u)" = 0 ] || die "cgo for $arch needs $triplet-gcc: apt-get install gcc-${triplet//_/-}"
		echo "image: installing Debian's gcc-$triplet (cgo for $arch)" >&2
		apt-get install -y -qq "gcc-$triplet" >/dev/null
	fi
	echo "$triplet-gcc"
}

mkdir -p "$OUT"
args=()
for platform in $PLATFORMS; do
	os=${platform%%/*}
	arch=${platform#*/}
	[ "$os" = linux ] || die "platform $platform: only linux images are built"
	dir="$OUT/${os}_$arch"
	mkdir -p "$dir"
	cc=$(cc_for "$arch")
	echo "image: $platform: go build (device plugin with cgo, $cc)"
	GOOS=$os GOARCH=$arch CGO_ENABLED=1 CC=$cc CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $GO build -trimpath -ldflags "-s -w" -o "$dir/gpushare-device-plugin" ./deviceplugin
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w" -o "$dir/gpushare-scheduler" ./scheduler
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w" -o "$dir/kubectl-inspect-gpushare" ./inspector
	base_tar "$arch" "$dir/libc6.tar"
	args+=(--platform "$platform=$dir=$dir/libc6.tar")
done
revision=${IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
$GO run ./hack/image --name "$IMAGE" --out "$OUT/gpushare.oci.tar" "${args[@]}" \
	--label "org.opencontainers.image.source=https://github.com/gpushare/gpushare" \
	--label "org.opencontainers.image.revision=$revision" \
	--label "org.opencontainers.image.version=$APP_VERSION" \
	${PUSH:+--push "$PUSH"}
