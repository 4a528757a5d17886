// Package ociimage builds gpushare's container images without a container engine, with
// go-containerregistry: deterministic layers from local files and from Debian package trees, one
// image per platform, an OCI index over the platforms, written as an OCI-layout archive (what
// `ctr images import` and `skopeo copy oci-archive:` read) or pushed to a registry.
//
// Deterministic means: the same inputs give the same digests, whatever the files' modification
// times, owners, the order they were listed in or the directory they were built in. Every entry is
// owned by 0:0 (unless a File says otherwise) with the modification time Epoch; entries are sorted
// by path, parents first.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification and creation time of everything in an image: the Unix epoch, so
// that a rebuild of one commit gives the same digest (docs/install.md, "Images").
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer.
type File struct {
	// Path in the image, absolute or not ("usr/local/bin/x" and "/usr/local/bin/x" are one).
	Path string
	// Source is a local file to copy; Data is used when Source is empty.
	Source string
	Data   []byte
	// Mode is the permission bits (0644 when 0); Dir makes a directory, Link a symlink to Link.
	Mode int64
	Dir  bool
	Link string
	// UID and GID own the entry (0: root).
	UID, GID int
}

// Layer is an OCI layer (gzip) holding files and every parent directory they need (0755, root).
// Two files with one path are an error.
func Layer(files []File) (v1.Layer, error) {
	entries := map[string]File{}
	for _, f := range files {
		p := clean(f.Path)
		if p == "" {
			return nil, fmt.Errorf("image file %q: empty path", f.Path)
		}
		if _, dup := entries[p]; dup {
			return nil, fmt.Errorf("image file %s listed twice", p)
		}
		f.Path = p
		entries[p] = f
	}
	for p := range entries {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		if err := writeEntry(tw, entries[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return fromTar(buf.Bytes())
}

func writeEntry(tw *tar.Writer, f File) error {
	h := &tar.Header{Name: f.Path, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: Epoch, Format: tar.FormatPAX}
	var data []byte
	switch {
	case f.Dir:
		h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
	case f.Link != "":
		h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
	default:
		h.Typeflag, data = tar.TypeReg, f.Data
		if f.Source != "" {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return fmt.Errorf("image file %s: %w", f.Path, err)
			}
			data = b
		}
		h.Size = int64(len(data))
	}
	if h.Mode == 0 {
		h.Mode = 0o644
		if f.Dir || f.Link != "" {
			h.Mode = 0o755
		}
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("image file %s: %w", f.Path, err)
	}
	_, err := tw.Write(data)
	return err
}

// TarLayer is an OCI layer (gzip) of a tar stream's entries that keep accepts (by path without a
// leading "./" or "/"), normalised as Layer's are (owner 0:0, time Epoch, PAX). Hard links are
// kept as links, other special files (devices, fifos) refused. It is how a Debian package's
// files (`dpkg-deb --fsys-tarfile`) become a base layer.
func TarLayer(r io.Reader, keep func(name string) bool) (v1.Layer, error) {
	tr := tar.NewReader(r)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var kept []*tar.Header
	contents := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read base tar: %w", err)
		}
		name := clean(h.Name)
		if name == "" || !keep(name) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return nil, fmt.Errorf("base tar: %s: unsupported entry type %q", name, h.Typeflag)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read base tar %s: %w", name, err)
		}
		n := &tar.Header{Name: name, Typeflag: h.Typeflag, Mode: h.Mode & 0o7777, Linkname: h.Linkname,
			Size: int64(len(b)), ModTime: Epoch, Format: tar.FormatPAX}
		if h.Typeflag == tar.TypeDir {
			n.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			n.Linkname = clean(h.Linkname)
		}
		kept = append(kept, n)
		contents[n.Name] = b
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Name < kept[j].Name })
	for _, h := range kept {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(contents[h.Name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return fromTar(buf.Bytes())
}

func fromTar(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func clean(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "." {
		return ""
	}
	return p
}
