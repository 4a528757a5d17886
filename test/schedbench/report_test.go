package schedbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/schedload"
)

// The all-nodes configuration is the project's with percentageOfNodesToScore
// 100 and nothing else changed; a configuration that already scores every
// node is refused (it would measure nothing new). The project's own
// configuration samples (kube-scheduler's adaptive default).
func TestWithNodesToScore(t *testing.T) {
	src := filepath.Join(cluster.RepoRoot(), cluster.SchedulerConfigFile)
	dst := filepath.Join(t.TempDir(), "all-nodes.yaml")
	if err := WithNodesToScore(src, dst, 100); err != nil {
		t.Fatal(err)
	}
	var orig, got map[string]any
	for path, m := range map[string]*map[string]any{src: &orig, dst: &got} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, m); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := orig["percentageOfNodesToScore"]; ok && v != float64(0) {
		t.Fatalf("%s sets percentageOfNodesToScore %v; the shipped configuration samples (0 or unset)", src, v)
	}
	if got["percentageOfNodesToScore"] != float64(100) {
		t.Errorf("the all-nodes configuration has percentageOfNodesToScore %v, want 100", got["percentageOfNodesToScore"])
	}
	delete(orig, "percentageOfNodesToScore")
	delete(got, "percentageOfNodesToScore")
	if !yamlEqual(t, orig, got) {
		t.Errorf("the all-nodes configuration changed more than percentageOfNodesToScore:\n%v\nwant\n%v", got, orig)
	}
	err := WithNodesToScore(dst, filepath.Join(t.TempDir(), "again.yaml"), 100)
	if err == nil || !strings.Contains(err.Error(), "already has percentageOfNodesToScore 100") {
		t.Errorf("a configuration that scores every node already: err = %v, want 'already has …'", err)
	}
}

// The runs' names become namespace names (generateName "bench-NAME-").
func TestAllNodesRunNamesAreNamespaceNames(t *testing.T) {
	for _, p := range []string{"binpack", "spread", "bestfit", "fgd", "frag"} {
		name := "bench-" + p + AllNodesSuffix + "-x"
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

func yamlEqual(t *testing.T, a, b map[string]any) bool {
	t.Helper()
	ra, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ra) == string(rb)
}

// "÷ before" compares a policy with its BASELINE run only, never with its
// -all-nodes run.
func TestReportComparesWithTheBaselineOnly(t *testing.T) {
	run := func(name, policy string, pods float64) Result {
		return Result{Name: name, Policy: policy, Throughput: schedload.Throughput{Overall: pods}}
	}
	report := func(results ...Result) string {
		var b strings.Builder
		printReport(&b, Options{SchedulerConfig: "cfg"}, &Bench{}, results)
		return b.String()
	}
	if out := report(run("kube-scheduler", "", 50), run("frag", "frag", 100), run("frag"+AllNodesSuffix, "frag", 200)); strings.Contains(out, "÷ before") {
		t.Errorf("an -all-nodes run was taken for a baseline:\n%s", out)
	}
	out := report(run("kube-scheduler", "", 50), run("frag"+BaselineSuffix, "frag", 100), run("frag", "frag", 150))
	if !strings.Contains(out, "÷ before") || !strings.Contains(out, "1.50") {
		t.Errorf("the baseline comparison is missing (want ÷ before 1.50):\n%s", out)
	}
}

// Each extender run is compared with kube-scheduler's defaults ("÷ plain")
// and, when that run is there, with kube-scheduler scoring every node
// ("÷ plain all nodes"); the all-nodes run itself is compared with the
// defaults only.
func TestReportComparesWithBothPlainRuns(t *testing.T) {
	run := func(name, policy string, pods float64) Result {
		return Result{Name: name, Policy: policy, Throughput: schedload.Throughput{Overall: pods}}
	}
	var b strings.Builder
	printReport(&b, Options{SchedulerConfig: "cfg"}, &Bench{}, []Result{run("kube-scheduler", "", 400), run(PlainAllNodes, "", 200), run("frag", "frag", 300)})
	out := b.String()
	row := func(prefix string) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.Join(f[:2], " ") == prefix {
				return f
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, out)
		return nil
	}
	if !strings.Contains(out, "÷ plain all nodes") {
		t.Fatalf("no all-nodes ratio column:\n%s", out)
	}
	// "(x)", name, bound, created in, last bind at, overall, steady, ÷ plain, ÷ plain all nodes.
	if f := row("(b) frag"); f[7] != "0.75" || f[8] != "1.50" {
		t.Errorf("frag: ÷ plain %s, ÷ plain all nodes %s; want 0.75 and 1.50:\n%s", f[7], f[8], out)
	}
	if f := row("(a) " + PlainAllNodes); f[7] != "0.50" || f[8] != "-" {
		t.Errorf("all nodes: ÷ plain %s, ÷ plain all nodes %s; want 0.50 and -:\n%s", f[7], f[8], out)
	}
}
