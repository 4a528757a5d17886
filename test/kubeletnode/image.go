package kubeletnode

import (
	"fmt"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpushare/gpushare/internal/ociimage"
)

// ProbePrefix starts every line the probe image prints (kubeletnode/probe,
// which keeps its own copy: it is a static program without this package's
// dependencies).
const ProbePrefix = "gpushare-probe "

// ProbeReport is one line of the probe image: what the container sees.
type ProbeReport struct {
	Seq            int               `json:"seq"`
	Env            map[string]string `json:"env"`
	DeviceRequests []string          `json:"deviceRequests"`
	Devices        []ProbeDevice     `json:"devices"`
	// Opens, UID, CapEff, Writable and Connects: what the container may do
	// (see the probe's doc: "ok" or an errno name per path).
	Opens    map[string]string `json:"opens"`
	UID      int               `json:"uid"`
	CapEff   string            `json:"capEff"`
	Writable map[string]string `json:"writable"`
	Connects map[string]string `json:"connects"`
}

// ProbeDevice is a /dev/nvidia* node the container sees.
type ProbeDevice struct {
	Path  string `json:"path"`
	Char  bool   `json:"char"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Image describes a one-layer image made of local files.
type Image struct {
	// Name is the image reference containerd records, e.g.
	// gpushare.local/e2e/probe:v1.
	Name string
	// Files maps a path in the image to a local file (copied, mode 0755).
	Files      map[string]string
	Entrypoint []string
	Env        []string
}

// WriteOCIArchive writes img as an OCI image layout tar archive that
// `ctr images import` accepts (index.json names the image with the
// io.containerd.image.name annotation), for this machine's platform, with the
// product's image builder (internal/ociimage, go-containerregistry).
func WriteOCIArchive(archive string, img Image) error {
	var files []ociimage.File
	for p, local := range img.Files {
		files = append(files, ociimage.File{Path: p, Source: local, Mode: 0o755})
	}
	built, err := ociimage.ProgramImage(ociimage.Platform{OS: "linux", Architecture: runtime.GOARCH}, files,
		ociimage.Config{Entrypoint: img.Entrypoint, Env: img.Env})
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	idx, err := ociimage.Index([]v1.Image{built})
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(archive, img.Name, idx)
}
