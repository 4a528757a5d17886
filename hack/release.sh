#!/usr/bin/env bash
# make release PUSH=<registry>/<path>: publishes this tree as a release to one registry path:
#
#   <PUSH>/gpushare:<appVersion>           the image (every platform of PLATFORMS), by hack/image.sh
#   oci://<PUSH>/charts/gpushare:<version> the chart, by `helm push`, its default image.repository
#                                          set to <PUSH>/gpushare (image.tag defaults to appVersion)
#
# so `helm install gpushare oci://<PUSH>/charts/gpushare --version <version>` runs the image pushed
# with it. Credentials: docker login (the image) and helm registry login (the chart); a registry
# whose certificate a private CA signed: SSL_CERT_FILE=ca.pem (both are Go programs).
# RELEASE_OUT (default bin/release) keeps the image archive and the packaged chart.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release: $*" >&2; exit 1; }

PUSH=${PUSH:-}
OUT=${RELEASE_OUT:-bin/release}
[ -n "$PUSH" ] || die "PUSH names the registry path to publish to, e.g. make release PUSH=registry.example.com/gpushare"
case "$PUSH" in
*://* | */ | *@*) die "PUSH=$PUSH: want host[:port]/path, without a scheme, a trailing / or a digest" ;;
*/*) ;;
*) die "PUSH=$PUSH: want host[:port]/path (the image goes to \$PUSH/gpushare, the chart to oci://\$PUSH/charts)" ;;
esac
last=${PUSH##*/}
[[ "$last" != *:* ]] || die "PUSH=$PUSH: name a path, not a tag (the tag is the chart's appVersion)"

field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" charts/gpushare/Chart.yaml; }
VERSION=$(field version)
APP_VERSION=$(field appVersion)
[ -n "$VERSION" ] && [ -n "$APP_VERSION" ] || die "charts/gpushare/Chart.yaml: no version or appVersion"
repo="$PUSH/gpushare"
helm="$(hack/tools.sh helm)"

# The image: built and pushed by hack/image.sh (go-containerregistry).
IMAGE="$repo:$APP_VERSION" PUSH="$repo:$APP_VERSION" IMAGE_OUT="$OUT/image" hack/image.sh

# The chart: a copy whose values.yaml names the pushed repository, packaged and pushed.
rm -rf "$OUT/chart"
mkdir -p "$OUT/chart"
cp -r charts/gpushare "$OUT/chart/gpushare"
values="$OUT/chart/gpushare/values.yaml"
# The first `repository:` under the top-level `image:` block.
awk -v repo="$repo" '
	/^[^ #]/ { inimage = ($0 ~ /^image:/) }
	inimage && !done && /^  repository:/ { sub(/repository:.*/, "repository: " repo); done = 1 }
	{ print }
	END { if (!done) exit 3 }' "$values" >"$values.new" || die "$values: no image.repository under image:"
mv "$values.new" "$values"
got=$("$helm" show values "$OUT/chart/gpushare" | awk '/^image:/ { i = 1; next } /^[^ ]/ { i = 0 } i && /^  repository:/ { print $2; exit }')
[ "$got" = "$repo" ] || die "the packaged chart's image.repository is \"$got\", want \"$repo\""
rm -f "$OUT"/gpushare-*.tgz
"$helm" package "$OUT/chart/gpushare" --destination "$OUT" >/dev/null
pkg="$OUT/gpushare-$VERSION.tgz"
[ -f "$pkg" ] || die "helm package wrote no $pkg"
"$helm" push "$pkg" "oci://$PUSH/charts"

echo "release: image $repo:$APP_VERSION, chart oci://$PUSH/charts/gpushare version $VERSION"
echo "release: helm install gpushare oci://$PUSH/charts/gpushare --version $VERSION -n gpushare-system --create-namespace"
