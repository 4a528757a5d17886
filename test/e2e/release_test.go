package e2e

import (
	"archive/tar"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/cluster"
)

// The install lane's registry: go-containerregistry's registry over TLS on 127.0.0.1, its CA
// given to containerd in a hosts.toml (containerd pulls the chart's image from it) and to helm and
// `make release` through SSL_CERT_FILE. Two releases are published to it: this tree's with the
// commands docs/install.md gives, and the previous release's (previousRelease), which the lane
// installs first and upgrades from.

const (
	// previousRelease is the commit of the release the install lane upgrades from: its chart and
	// image, published with this tree's hack/release.sh. Move it to the last release at each one.
	previousRelease = "f9cee9ddd63457f294c53b76c920604bf73f098b"
	// docsRegistry is the registry path docs/install.md's commands name.
	docsRegistry = "registry.example.com/gpushare"
	// releasePlatform is the one platform the lane builds (make release's default builds two).
	releasePlatform = "PLATFORMS=linux/amd64"
)

// laneRegistry is a running registry and what its clients need.
type laneRegistry struct {
	host     string // 127.0.0.1:port
	caFile   string // PEM of the certificate the registry serves (self-signed, so its own CA)
	hostsDir string // containerd's config_path: <host>/hosts.toml names the CA
	client   *http.Client
}

// startRegistry starts the registry and writes the CA and containerd's hosts.toml for it.
func startRegistry(t *testing.T) *laneRegistry {
	t.Helper()
	s, err := registry.TLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	r := &laneRegistry{host: strings.TrimPrefix(s.URL, "https://"), hostsDir: filepath.Join(t.TempDir(), "certs.d"), client: s.Client()}
	dir := filepath.Join(r.hostsDir, r.host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.caFile = filepath.Join(dir, "ca.crt")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
		s.URL, s.URL, r.caFile)
	for file, b := range map[string][]byte{r.caFile: ca, filepath.Join(dir, "hosts.toml"): []byte(hosts)} {
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// env is the environment of a registry client: Go programs (helm, hack/image) trust the CA.
func (r *laneRegistry) env() []string { return append(os.Environ(), "SSL_CERT_FILE="+r.caFile) }

// release is a published release: the registry path (PUSH), the chart's version and the pushed
// image as the kubelet reports a pulled one (repository@index digest).
type release struct{ push, version, image string }

// publish runs cmd (make release or hack/release.sh) and reads what it pushed from its output.
func (r *laneRegistry) publish(push string, cmd *exec.Cmd) (release, error) {
	cmd.Env = append(r.env(), cmd.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return release{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	pushed := regexp.MustCompile(`pushed (\S+)@(sha256:[0-9a-f]{64})`).FindSubmatch(out)
	chart := regexp.MustCompile(`chart oci://(\S+)/charts/gpushare version (\S+)`).FindSubmatch(out)
	if pushed == nil || chart == nil || string(chart[1]) != push {
		return release{}, fmt.Errorf("%s printed no pushed image or chart of %s:\n%s", strings.Join(cmd.Args, " "), push, out)
	}
	repo := string(pushed[1])
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i] // the tag
	}
	if repo != push+"/gpushare" {
		return release{}, fmt.Errorf("the image went to %s, want %s/gpushare", repo, push)
	}
	return release{push: push, version: string(chart[2]), image: repo + "@" + string(pushed[2])}, nil
}

// publishBoth publishes the previous release (publishPrevious) and this tree's (docs/install.md's
// `make release` line, for the lane's platform only) side by side, and returns them and the
// previous release's tree.
func (r *laneRegistry) publishBoth(t *testing.T) (previous, current release, previousTree string) {
	t.Helper()
	start := time.Now()
	push := r.host + "/gpushare"
	args := append(docsCommand(t, "make release PUSH=", docsRegistry, push), releasePlatform, "RELEASE_OUT="+filepath.Join(binDir, "release"))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = cluster.RepoRoot()
	previousTree = filepath.Join(binDir, "previous-release")
	var prevErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		previous, prevErr = r.publishPrevious(previousTree)
	}()
	current, err := r.publish(push, cmd)
	<-done
	if err = errors.Join(prevErr, err); err != nil {
		t.Fatal(err)
	}
	if previous.version == current.version {
		t.Fatalf("the previous release and this tree both publish chart %s: bump charts/gpushare/Chart.yaml's version", current.version)
	}
	t.Logf("published %s (chart %s, image %s) and %s (chart %s, image %s) in %v", previous.push, previous.version, previous.image,
		current.push, current.version, current.image, time.Since(start).Round(time.Second))
	return previous, current, previousTree
}

// publishPrevious publishes previousRelease's tree (from git, into tree) with this tree's
// hack/release.sh to the registry path this tree's release goes to (<registry>/gpushare): as an
// operator sees them, one chart repository with two versions, one image repository with two tags.
func (r *laneRegistry) publishPrevious(tree string) (release, error) {
	root := cluster.RepoRoot()
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		return release{}, fmt.Errorf("the install lane upgrades from commit %s, which this clone lacks (shallow? git fetch --unshallow): %w %s", previousRelease, err, out)
	}
	if err := os.MkdirAll(filepath.Join(tree, "hack"), 0o755); err != nil {
		return release{}, err
	}
	if out, err := exec.Command("bash", "-c", `set -o pipefail; git -C "$1" archive "$2" | tar -x -C "$3"`, "_", root, previousRelease, tree).CombinedOutput(); err != nil {
		return release{}, fmt.Errorf("git archive %s: %w\n%s", previousRelease, err, out)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "release.sh"))
	if err != nil {
		return release{}, err
	}
	if err := os.WriteFile(filepath.Join(tree, "hack", "release.sh"), script, 0o755); err != nil {
		return release{}, err
	}
	push := r.host + "/gpushare"
	cmd := exec.Command(filepath.Join(tree, "hack", "release.sh"))
	cmd.Dir = tree
	cmd.Env = []string{"PUSH=" + push, releasePlatform, "IMAGE_REVISION=" + previousRelease, "RELEASE_OUT=" + filepath.Join(binDir, "previous-out")}
	return r.publish(push, cmd)
}

// imageHasFile fails unless the pushed image (for this machine's platform) holds path.
func (r *laneRegistry) imageHasFile(t *testing.T, image, path string) {
	t.Helper()
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, remote.WithTransport(r.client.Transport))
	if err != nil {
		t.Fatalf("pull %s: %v", image, err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("image %s has no %s", image, path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == path {
			if h.Mode&0o111 == 0 {
				t.Errorf("%s in %s is not executable: %o", path, image, h.Mode)
			}
			return
		}
	}
}

// docsLine is the first line of docs/install.md that starts with prefix, its comment cut.
func docsLine(t *testing.T, prefix string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		return line
	}
	t.Fatalf("docs/install.md has no command starting %q", prefix)
	return ""
}

// docsCommand is docsLine with each old, new pair of replacements made, as words. A placeholder
// left (<...>) or shell syntax fails the test.
func docsCommand(t *testing.T, prefix string, replacements ...string) []string {
	t.Helper()
	line := strings.NewReplacer(replacements...).Replace(docsLine(t, prefix))
	if strings.ContainsAny(line, "<>|&;$`\\") {
		t.Fatalf("docs/install.md's command %q: a placeholder or shell syntax the lane does not fill", line)
	}
	return strings.Fields(line)
}

// overridesFor are the lane's overrides the chart in dir has values for (an older chart's schema
// refuses keys it does not know).
func overridesFor(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range installOverrides {
		key, _, _ := strings.Cut(o, "=")
		m, found := values, false
		for _, k := range strings.Split(key, ".") {
			var v any
			v, found = m[k]
			m, _ = v.(map[string]any)
		}
		if found {
			out = append(out, o)
		}
	}
	return out
}
