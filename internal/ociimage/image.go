package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what a container of the image runs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User is "uid:gid" (empty: root).
	User       string
	WorkingDir string
	Labels     map[string]string
}

// Platform is one image of an index: its OS and architecture ("linux", "arm64") and its layers,
// bottom first.
type Platform struct {
	OS, Architecture, Variant string
	Layers                    []v1.Layer
}

// String is "os/arch[/variant]".
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// Image is one platform's OCI image: its layers and cfg, created at Epoch.
func Image(p Platform, cfg Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range p.Layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "gpushare ociimage"}})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", p, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = v1.Config{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, User: cfg.User,
		WorkingDir: cfg.WorkingDir, Labels: cfg.Labels}
	return mutate.ConfigFile(img, cf)
}

// Index is an OCI image index over images, one per platform, in the order given.
func Index(images []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if seen[p.String()] {
			return nil, fmt.Errorf("index: platform %s twice", p.String())
		}
		seen[p.String()] = true
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &p}})
	}
	return idx, nil
}

// WriteArchive writes idx as an OCI image layout tar archive at archive, named ref: index.json
// holds one descriptor of idx with the annotations containerd (io.containerd.image.name = ref)
// and the OCI layout (org.opencontainers.image.ref.name = ref's tag) name images by. The archive
// is deterministic: sorted entries, owner 0:0, time Epoch.
func WriteArchive(archive, ref string, idx v1.ImageIndex) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(archive), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          r.Name(),
		"org.opencontainers.image.ref.name": r.Identifier(),
	})); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	return tarDir(dir, archive)
}

// tarDir writes every regular file below dir into a tar at out, sorted, normalised.
func tarDir(dir, out string) error {
	var files []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, rel := range files {
		if err := copyInto(tw, filepath.Join(dir, rel), rel); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func copyInto(tw *tar.Writer, src, name string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: st.Size(), ModTime: Epoch,
		Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// Push uploads idx to the registry reference ref (e.g. registry.example.com/gpushare:0.1.0),
// with the credentials of the default keychain (~/.docker/config.json, $DOCKER_CONFIG).
// Options are go-containerregistry's remote options (a transport, for instance).
func Push(ref string, idx v1.ImageIndex, opts ...remote.Option) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("push: image name %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Summary describes one platform's image: its manifest digest, its config digest (the image ID
// containerd and the kubelet report as a container's imageID when the image came from an archive),
// compressed size (what a node pulls) and uncompressed size (what it unpacks).
type Summary struct {
	Platform                 string
	Digest, Config           v1.Hash
	Compressed, Uncompressed int64
}

// Summarize lists idx's images.
func Summarize(idx v1.ImageIndex) ([]Summary, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		s := Summary{Digest: d.Digest}
		if s.Config, err = img.ConfigName(); err != nil {
			return nil, err
		}
		if d.Platform != nil {
			s.Platform = d.Platform.String()
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		for _, l := range layers {
			c, err := l.Size()
			if err != nil {
				return nil, err
			}
			s.Compressed += c
			rc, err := l.Uncompressed()
			if err != nil {
				return nil, err
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			s.Uncompressed += n
		}
		out = append(out, s)
	}
	return out, nil
}

// ParsePlatform reads "linux/arm64" or "linux/arm/v7".
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("platform %q: want os/arch[/variant], e.g. linux/arm64", s)
	}
	p := Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}
