package ociimage

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Binaries are the programs of the gpushare image, in /usr/local/bin.
var Binaries = []string{"gpushare-scheduler", "gpushare-device-plugin", "kubectl-inspect-gpushare"}

// NonRoot is the image's default user (uid:gid), the one distroless images name "nonroot".
const NonRoot = "65532:65532"

// KeepGlibc selects, from the files of Debian's libc6 package, what a dynamically linked program
// needs at run time: the loader and the shared libraries (lib/, lib64/), the loader's search path
// (etc/ld.so.conf.d/) and the licence. It leaves out the gconv character-set modules
// (usr/lib/<triplet>/gconv, ~8 MB, used only by iconv) and the documentation.
func KeepGlibc(name string) bool {
	switch {
	case name == "lib" || strings.HasPrefix(name, "lib/"),
		name == "lib64" || strings.HasPrefix(name, "lib64/"),
		name == "etc" || name == "etc/ld.so.conf.d" || strings.HasPrefix(name, "etc/ld.so.conf.d/"),
		name == "usr/share/doc/libc6/copyright":
		return true
	}
	return false
}

// GpushareImage is one platform of the gpushare image: the glibc files of base (a tar of Debian's
// libc6 package for that platform, as `dpkg-deb --fsys-tarfile` writes it), a root filesystem
// skeleton (/etc/passwd and /etc/group naming root and nonroot, /tmp), and the three Binaries
// from binDir. The default user is NonRoot and the entrypoint gpushare-scheduler, as the Helm
// chart expects (the device plugin's DaemonSet runs it as root and names its command).
func GpushareImage(p Platform, base io.Reader, binDir string, labels map[string]string) (v1.Image, error) {
	glibc, err := TarLayer(base, KeepGlibc)
	if err != nil {
		return nil, fmt.Errorf("%s base layer: %w", p, err)
	}
	skeleton, err := Layer([]File{
		{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "root", Dir: true, Mode: 0o700},
		{Path: "home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	})
	if err != nil {
		return nil, err
	}
	var bins []File
	for _, b := range Binaries {
		bins = append(bins, File{Path: "usr/local/bin/" + b, Source: filepath.Join(binDir, b), Mode: 0o755})
	}
	programs, err := Layer(bins)
	if err != nil {
		return nil, err
	}
	p.Layers = []v1.Layer{glibc, skeleton, programs}
	return Image(p, Config{
		Entrypoint: []string{"/usr/local/bin/gpushare-scheduler"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:       NonRoot,
		Labels:     labels,
	})
}

// ProgramImage is a one-program image (the kube-scheduler image the install test makes from the
// kube-scheduler it builds, a test probe, a pause image): the files, entrypoint and env.
func ProgramImage(p Platform, files []File, cfg Config) (v1.Image, error) {
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	p.Layers = []v1.Layer{l}
	return Image(p, cfg)
}
