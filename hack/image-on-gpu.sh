#!/usr/bin/env bash
# The gpushare image's device plugin on a real GPU, without Kubernetes (docs/hardware.md):
#   hack/image-on-gpu.sh prepare   here: unpack the linux/amd64 image of bin/image-amd64/gpushare.oci.tar
#                                  (PLATFORMS=linux/amd64 IMAGE_OUT=bin/image-amd64 make image) into
#                                  bin/imgproof/rootfs.tar.gz, less the extender and the inspector
#                                  (the GPU machine's transfer limit)
#   hack/image-on-gpu.sh run       on the GPU machine (root): that root filesystem, the host's
#                                  libnvidia-ml.so.1 copied in as NVIDIA's runtime would mount it,
#                                  /dev, /proc, /sys bound; the image's loader lists what the plugin
#                                  links, then the plugin discovers the cards with the real NVML.
set -euo pipefail
cd "$(dirname "$0")/.."
R=/tmp/gpushare-rootfs
case "${1:-}" in
prepare)
	rm -rf "$R" && mkdir -p "$R" bin/imgproof
	python3 - bin/image-amd64/gpushare.oci.tar "$R" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1])
top = json.load(t.extractfile("index.json"))["manifests"][0]
man = next(m for m in json.load(blob(top["digest"]))["manifests"] if m["platform"]["architecture"] == "amd64")
print("image", top["annotations"]["io.containerd.image.name"], "manifest", man["digest"])
for l in json.load(blob(man["digest"]))["layers"]:
    tarfile.open(fileobj=blob(l["digest"]), mode="r:gz").extractall(sys.argv[2])
PY
	tar czf bin/imgproof/rootfs.tar.gz -C "$R" --exclude=./usr/local/bin/gpushare-scheduler \
		--exclude=./usr/local/bin/kubectl-inspect-gpushare .
	ls -la bin/imgproof/rootfs.tar.gz
	;;
run)
	rm -rf "$R" && mkdir -p "$R" && tar xzf bin/imgproof/rootfs.tar.gz -C "$R"
	sha256sum "$R/usr/local/bin/gpushare-device-plugin"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
	lib=$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')
	echo "host NVML: $lib"
	mkdir -p "$R/usr/lib/x86_64-linux-gnu" "$R/dev" "$R/proc" "$R/sys"
	cp -L "$lib" "$R/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
	mount --bind /dev "$R/dev" && mount -t proc proc "$R/proc" && mount --bind /sys "$R/sys"
	trap 'umount "$R/sys" "$R/proc" "$R/dev"' EXIT
	printf '%s\n' 'apiVersion: v1' 'kind: Config' 'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]' \
		'users: [{name: u, user: {token: x}}]' 'contexts: [{name: c, context: {cluster: c, user: u}}]' \
		'current-context: c' >"$R/tmp/kc"
	echo "== what the image's loader links:"
	chroot "$R" /lib64/ld-linux-x86-64.so.2 --list /usr/local/bin/gpushare-device-plugin
	echo "== the image's device plugin, real NVML (then it stops: no API server here):"
	timeout 30 chroot "$R" /usr/local/bin/gpushare-device-plugin --nvml real --node-name proof \
		--kubeconfig /tmp/kc --device-plugin-dir /tmp/dp --pod-resources-socket "" 2>&1 | grep -v 'Feature gate' || true
	;;
*) echo "usage: hack/image-on-gpu.sh prepare|run" >&2; exit 2 ;;
esac
