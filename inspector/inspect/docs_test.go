package inspect

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// docsSample is a sample in docs/inspector.md: a marker naming a golden
// file, then a fenced block (```console) whose first line is the command.
var docsSample = regexp.MustCompile("(?s)<!-- golden: ([^ ]+) -->\n```(?:console)?\n(\\$ [^\n]*)\n(.*?)\n```")

// TestDocsSamplesAreTheGoldenFiles keeps docs/inspector.md honest: every
// sample there is the output of the command line it shows, as recorded in
// testdata/.
func TestDocsSamplesAreTheGoldenFiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "inspector.md"))
	if err != nil {
		t.Fatal(err)
	}
	samples := docsSample.FindAllStringSubmatch(string(doc), -1)
	if len(samples) == 0 {
		t.Fatal("docs/inspector.md has no <!-- golden: FILE --> samples")
	}
	for _, m := range samples {
		name, command, body := m[1], m[2], m[3]
		if strings.Contains(body, "```") {
			// An empty sample makes the pattern run on into the next block,
			// hiding the text between them from this test.
			t.Errorf("docs sample %s (%s) has no output in its block: paste the golden file there", name, command)
			continue
		}
		found := false
		for _, c := range goldenCases {
			if c.golden != name {
				continue
			}
			found = true
			want := strings.TrimSpace("$ kubectl inspect gpushare " + strings.Join(c.args, " "))
			if command != want {
				t.Errorf("docs sample %s shows %q, the golden file is the output of %q", name, command, want)
			}
		}
		if !found {
			t.Errorf("docs sample names %s, which no golden case produces", name)
			continue
		}
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(strings.Split(strings.TrimRight(string(golden), "\n"), "\n"), strings.Split(body, "\n")); diff != "" {
			t.Errorf("docs/inspector.md sample %s differs from testdata/%s (-golden +docs):\n%s", name, name, diff)
		}
	}
}
