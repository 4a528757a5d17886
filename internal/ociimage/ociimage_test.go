package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fakeDeb is a tar as `dpkg-deb --fsys-tarfile` writes it: "./" names, owners and times of
// the package's build.
func fakeDeb(t *testing.T, mtime time.Time) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		typ  byte
		link string
		body string
	}{
		{"./", tar.TypeDir, "", ""},
		{"./lib/", tar.TypeDir, "", ""},
		{"./lib/x86_64-linux-gnu/", tar.TypeDir, "", ""},
		{"./lib/x86_64-linux-gnu/libc.so.6", tar.TypeReg, "", "ELF libc"},
		{"./lib64/", tar.TypeDir, "", ""},
		{"./lib64/ld-linux-x86-64.so.2", tar.TypeSymlink, "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", ""},
		{"./usr/lib/x86_64-linux-gnu/gconv/UTF-16.so", tar.TypeReg, "", "gconv"},
		{"./usr/share/doc/libc6/copyright", tar.TypeReg, "", "GPL"},
		{"./usr/share/doc/libc6/changelog.gz", tar.TypeReg, "", "log"},
	} {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Size: int64(len(e.body)),
			Mode: 0o644, Uid: 1000, Uname: "builder", ModTime: mtime}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// buildIn lays the three binaries out in a fresh directory with the given modification time
// and builds the two-platform gpushare index from them.
func buildIn(t *testing.T, mtime time.Time) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	for i, b := range Binaries {
		p := filepath.Join(dir, b)
		if err := os.WriteFile(p, []byte(strings.Repeat("x", i+1)+b), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	var imgs []v1.Image
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := GpushareImage(Platform{OS: "linux", Architecture: arch}, bytes.NewReader(fakeDeb(t, mtime)), dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	idx, err := Index(imgs)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestTwoBuildsOfTheSameInputsHaveOneDigest(t *testing.T) {
	a := buildIn(t, time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	b := buildIn(t, time.Now())
	da, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if da != db {
		t.Fatalf("index digests differ across builds in other directories at other times: %s vs %s", da, db)
	}
	dir := t.TempDir()
	var sums [2][32]byte
	for i, idx := range []v1.ImageIndex{a, b} {
		archive := filepath.Join(dir, "gpushare.tar")
		if err := WriteArchive(archive, "ghcr.io/gpushare/gpushare:0.1.0", idx); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(raw)
	}
	if sums[0] != sums[1] {
		t.Fatal("the two OCI archives differ byte for byte")
	}
}

func TestADifferentBinaryChangesTheDigest(t *testing.T) {
	a := buildIn(t, Epoch)
	dir := t.TempDir()
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("other "+b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img, err := GpushareImage(Platform{OS: "linux", Architecture: "amd64"}, bytes.NewReader(fakeDeb(t, Epoch)), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Index([]v1.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da == db {
		t.Fatal("different programs, same digest")
	}
}

func TestBaseLayerKeepsTheLoaderAndLibrariesOnly(t *testing.T) {
	l, err := TarLayer(bytes.NewReader(fakeDeb(t, time.Now())), KeepGlibc)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(Epoch) {
			t.Errorf("%s: owner %d:%d time %s, want 0:0 at the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		got = append(got, h.Name)
	}
	want := "lib/ lib/x86_64-linux-gnu/ lib/x86_64-linux-gnu/libc.so.6 lib64/ lib64/ld-linux-x86-64.so.2 usr/share/doc/libc6/copyright"
	if strings.Join(got, " ") != want {
		t.Fatalf("base layer entries:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	if _, err := Layer([]File{{Path: "/a", Data: []byte("1")}, {Path: "a", Data: []byte("2")}}); err == nil {
		t.Error("one path twice: no error")
	}
	if _, err := Layer([]File{{Path: "/", Data: []byte("1")}}); err == nil {
		t.Error("empty path: no error")
	}
	for _, s := range []string{"linux", "/arm64", "linux/arm/v7/x"} {
		if _, err := ParsePlatform(s); err == nil {
			t.Errorf("ParsePlatform(%q): no error", s)
		}
	}
	if _, err := GpushareImage(Platform{OS: "linux", Architecture: "amd64"}, bytes.NewReader(fakeDeb(t, Epoch)), t.TempDir(), nil); err == nil ||
		!strings.Contains(err.Error(), "usr/local/bin/gpushare-") {
		t.Errorf("missing binaries: %v, want an error naming the missing program", err)
	}
	idx := buildIn(t, Epoch)
	m, _ := idx.IndexManifest()
	img, _ := idx.Image(m.Manifests[0].Digest)
	if _, err := Index([]v1.Image{img, img}); err == nil {
		t.Error("one platform twice in an index: no error")
	}
}

// The archive is an OCI layout go-containerregistry reads back, named as containerd expects.
func TestArchiveIsAnOCILayoutNamedForContainerd(t *testing.T) {
	idx := buildIn(t, Epoch)
	dir := t.TempDir()
	archive := filepath.Join(dir, "gpushare.tar")
	if err := WriteArchive(archive, "ghcr.io/gpushare/gpushare:0.1.0", idx); err != nil {
		t.Fatal(err)
	}
	unpacked := filepath.Join(dir, "layout")
	untar(t, archive, unpacked)
	p, err := layout.FromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want 1", len(m.Manifests))
	}
	d := m.Manifests[0]
	if got := d.Annotations["io.containerd.image.name"]; got != "ghcr.io/gpushare/gpushare:0.1.0" {
		t.Errorf("containerd name %q", got)
	}
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != "0.1.0" {
		t.Errorf("OCI ref name %q", got)
	}
	want, _ := idx.Digest()
	if d.Digest != want {
		t.Errorf("archive names index %s, built %s", d.Digest, want)
	}
	inner, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := Summarize(inner)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums[0].Platform != "linux/amd64" || sums[1].Platform != "linux/arm64" {
		t.Fatalf("platforms %+v", sums)
	}
	for _, s := range sums {
		if s.Compressed <= 0 || s.Uncompressed <= s.Compressed/2 {
			t.Errorf("%s sizes %d/%d", s.Platform, s.Compressed, s.Uncompressed)
		}
	}
}

func TestPushToARegistryAndPullTheSameDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/gpushare/gpushare:0.1.0"
	idx := buildIn(t, Epoch)
	if err := Push(ref, idx); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	gd, _ := got.Digest()
	wd, _ := idx.Digest()
	if gd != wd {
		t.Fatalf("pulled %s, pushed %s", gd, wd)
	}
	arm, err := remote.Image(r, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := arm.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.Config.User != NonRoot || cf.Config.Entrypoint[0] != "/usr/local/bin/gpushare-scheduler" {
		t.Fatalf("arm64 config %+v", cf.Config)
	}
	if err := Push("not a reference!", idx); err == nil {
		t.Error("push to a malformed reference: no error")
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
