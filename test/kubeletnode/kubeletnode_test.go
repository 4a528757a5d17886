package kubeletnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestCardsAndCDISpecNameEveryCardByUUIDIndexAndAll(t *testing.T) {
	o := &Options{NodeName: "gpu-kubelet-1", StateDir: "/state", GPUs: "2x40GiB:NVIDIA-A100"}
	cards, err := o.Cards()
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 2 || cards[0].UUID == cards[1].UUID || !strings.HasPrefix(cards[0].UUID, "GPU-") {
		t.Fatalf("cards: %+v", cards)
	}
	if cards[1].HostNode != "/state/dev/nvidia-"+cards[1].UUID || cards[1].ContainerPath != "/dev/nvidia1" || cards[1].Minor != 1 {
		t.Errorf("card 1: %+v", cards[1])
	}
	b, err := o.cdiSpec(cards)
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				DeviceNodes []struct {
					Path, HostPath string
				} `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			got[d.Name] = append(got[d.Name], n.Path+"<-"+n.HostPath)
		}
	}
	n0 := "/dev/nvidia0<-/state/dev/nvidia-" + cards[0].UUID
	n1 := "/dev/nvidia1<-/state/dev/nvidia-" + cards[1].UUID
	want := map[string][]string{cards[0].UUID: {n0}, "0": {n0}, cards[1].UUID: {n1}, "1": {n1}, "all": {n0, n1}}
	if spec.Kind != "nvidia.com/gpu" {
		t.Errorf("kind %q", spec.Kind)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CDI devices (-want +got):\n%s", diff)
	}
}

func TestToolkitConfigCarriesTheDocumentedSettingsInCDIMode(t *testing.T) {
	o := &Options{StateDir: "/state", Runc: "/usr/sbin/runc"}
	cfg := o.toolkitConfig()
	for _, want := range []string{
		SettingVolumeMounts + " = true",
		SettingEnvvarUnprivileged + " = false",
		`mode = "cdi"`,
		`spec-dirs = ["/state/cdi"]`,
		`runtimes = ["/usr/sbin/runc"]`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.toml lacks %q:\n%s", want, cfg)
		}
	}
	o.AcceptEnvvarUnprivileged = true
	if !strings.Contains(o.toolkitConfig(), SettingEnvvarUnprivileged+" = true") {
		t.Errorf("AcceptEnvvarUnprivileged not written")
	}
}

func TestOCIArchiveNamesTheImageAndHoldsItsFiles(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "probe")
	if err := os.WriteFile(bin, []byte("#!probe"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "probe.tar")
	if err := WriteOCIArchive(archive, Image{Name: "gpushare.local/e2e/probe:v1", Files: map[string]string{"/bin/probe": bin},
		Entrypoint: []string{"/bin/probe"}, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		blobs[h.Name] = b
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != "gpushare.local/e2e/probe:v1" {
		t.Errorf("image name annotation %q", got)
	}
	blob := func(digest string) []byte { return blobs["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")] }
	// index.json names the image's index, which lists one manifest, for this machine's platform.
	var inner struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &inner); err != nil || len(inner.Manifests) != 1 {
		t.Fatalf("image index: %v %s", err, blob(index.Manifests[0].Digest))
	}
	if p := inner.Manifests[0].Platform; p.OS != "linux" || p.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", p.OS, p.Architecture, runtime.GOARCH)
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(blob(inner.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		h, err := lr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if diff := cmp.Diff([]string{"bin/", "bin/probe"}, names); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(blob(manifest.Config.Digest)), "NVIDIA_VISIBLE_DEVICES=all") {
		t.Errorf("config lacks the image env")
	}
}

func TestContainerdMajorIsReadFromEitherVersionLine(t *testing.T) {
	for line, want := range map[string]int{
		"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n": 1,
		"containerd github.com/containerd/containerd/v2 v2.4.2 \n":                      2,
	} {
		got, err := parseContainerdMajor(line)
		if err != nil || got != want {
			t.Errorf("parseContainerdMajor(%q) = %d, %v; want %d", line, got, err, want)
		}
	}
	if _, err := parseContainerdMajor("containerd"); err == nil {
		t.Error("a line without a version: no error")
	}
}

func TestContainerd2ConfigReadsTheNVIDIASpecAndTheDriversCDIDirectory(t *testing.T) {
	o := &Options{StateDir: "/state", PauseImage: "gpushare.local/e2e/pause:v1", NvidiaRuntime: "/cache/nvidia-container-runtime",
		CDISpecDirs: []string{"/state/dra-cdi"}, containerdMajor: 2}
	cfg := o.containerdConfig()
	for _, want := range []string{
		"version = 3",
		`cdi_spec_dirs = ["/state/cdi", "/state/dra-cdi"]`,
		`BinaryName = "/cache/nvidia-container-runtime"`,
		`sandbox = "gpushare.local/e2e/pause:v1"`,
		`"io.containerd.nri.v1.nri"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd 2's config lacks %q:\n%s", want, cfg)
		}
	}
	o.containerdMajor = 1
	if cfg := o.containerdConfig(); !strings.Contains(cfg, "version = 2") || strings.Contains(cfg, "cdi_spec_dirs") {
		t.Errorf("containerd 1.6's config:\n%s", cfg)
	}
}

func TestContainerdConfigPointsTheImageServiceAtTheRegistryHostsDirectory(t *testing.T) {
	for _, tc := range []struct {
		major int
		table string
	}{
		{1, `[plugins."io.containerd.grpc.v1.cri".registry]`},
		{2, `[plugins."io.containerd.cri.v1.images".registry]`},
	} {
		o := &Options{StateDir: "/state", Runc: "/usr/sbin/runc", containerdMajor: tc.major}
		if cfg := o.containerdConfig(); strings.Contains(cfg, "config_path") {
			t.Errorf("containerd %d without RegistryConfigDir sets a config_path:\n%s", tc.major, cfg)
		}
		o.RegistryConfigDir = "/state/certs.d"
		cfg := o.containerdConfig()
		want := tc.table + "\n    config_path = \"/state/certs.d\"\n"
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd %d configuration lacks %q:\n%s", tc.major, want, cfg)
		}
	}
}
