// Command image assembles the gpushare image from binaries built for each platform and the
// glibc of Debian's libc6 package, writes it as an OCI archive and, with --push, pushes it
// (hack/image.sh drives it; `make image`).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpushare/gpushare/internal/ociimage"
)

func main() {
	var ref, out, push string
	var platforms []string
	labels := map[string]string{}
	flag.StringVar(&ref, "name", "", "image reference the archive names, e.g. ghcr.io/gpushare/gpushare:0.1.0 (required)")
	flag.StringVar(&out, "out", "", "OCI archive to write (required)")
	flag.StringVar(&push, "push", "", "also push the image to this registry reference")
	flag.Func("platform", "os/arch=BINDIR=BASE.tar: the binaries and the libc6 tree of one platform (repeatable)",
		func(s string) error { platforms = append(platforms, s); return nil })
	flag.Func("label", "k=v image label (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("label %q: want k=v", s)
		}
		labels[k] = v
		return nil
	})
	flag.Parse()
	if err := run(ref, out, push, platforms, labels); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ref, out, push string, platforms []string, labels map[string]string) error {
	if ref == "" || out == "" || len(platforms) == 0 {
		return fmt.Errorf("--name, --out and at least one --platform are required")
	}
	var imgs []v1.Image
	for _, s := range platforms {
		parts := strings.SplitN(s, "=", 3)
		if len(parts) != 3 {
			return fmt.Errorf("--platform %q: want os/arch=BINDIR=BASE.tar", s)
		}
		p, err := ociimage.ParsePlatform(parts[0])
		if err != nil {
			return err
		}
		base, err := os.Open(parts[2])
		if err != nil {
			return err
		}
		img, err := ociimage.GpushareImage(p, base, parts[1], labels)
		base.Close()
		if err != nil {
			return err
		}
		imgs = append(imgs, img)
	}
	idx, err := ociimage.Index(imgs)
	if err != nil {
		return err
	}
	if err := ociimage.WriteArchive(out, ref, idx); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	sums, err := ociimage.Summarize(idx)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n  index %s\n  archive %s\n", ref, d, out)
	for _, s := range sums {
		fmt.Printf("  %-12s %s  %5.1f MiB compressed, %5.1f MiB unpacked, image ID %s\n", s.Platform, s.Digest,
			float64(s.Compressed)/(1<<20), float64(s.Uncompressed)/(1<<20), s.Config)
	}
	if push != "" {
		if err := ociimage.Push(push, idx); err != nil {
			return err
		}
		fmt.Printf("  pushed %s@%s\n", push, d)
	}
	return nil
}
