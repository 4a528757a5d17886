package kubeletnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
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
// io.containerd.image.name annotation), for this machine's platform.
func WriteOCIArchive(archive string, img Image) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return d, len(b)
	}
	layerDigest, layerSize := put(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Env": img.Env, "Entrypoint": img.Entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest, configSize := put(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": configSize},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	if err != nil {
		return err
	}
	manifestDigest, manifestSize := put(manifest)
	tag := img.Name[strings.LastIndex(img.Name, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest":    manifestDigest, "size": manifestSize,
			"platform": map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          img.Name,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(archive, out.Bytes(), 0o644)
}

// layerTar is an uncompressed layer with the files (and their directories).
func layerTar(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	src := map[string]string{}
	names := make([]string, 0, len(files))
	for n, local := range files {
		n = strings.TrimPrefix(path.Clean("/"+n), "/")
		src[n] = local
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		var parents []string
		for d := path.Dir(n); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(src[n])
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", n, err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
