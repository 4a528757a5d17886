package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const doc = "# A doc\n" + // 1
	"\n" + // 2
	"```sh\n" + // 3
	"kubectl get pods   # a comment\n" + // 4
	"# a comment line\n" + // 5
	"helm install x \\\n" + // 6
	"  --set a=b\n" + // 7
	"kubectl create -f - <<'EOF'\n" + // 8
	"kind: Pod\n" + // 9
	"EOF\n" + // 10
	"```\n" + // 11
	"<!-- docs-run: sub `<pod>` `single` -->\n" + // 12
	"<!-- docs-run: skip `kubectl exec`: no containers -->\n" + // 13
	"<!-- docs-run: last -->\n" + // 14
	"```sh\n" + // 15
	"kubectl describe pod <pod>\n" + // 16
	"kubectl exec <pod> -- true\n" + // 17
	"```\n" + // 18
	"```console\n" + // 19
	"$ kubectl inspect gpushare --server https://127.0.0.1:1\n" + // 20
	"error: cannot reach the API server at https://127.0.0.1:1: dial tcp: refused\n" + // 21
	"$ kubectl inspect gpushare\n" + // 22
	"NAME  GPU0\n" + // 23
	"```\n" + // 24
	"```yaml\n" + // 25
	"kubectl: not a command in yaml\n" + // 26
	"```\n" // 27

func TestParseFindsEachCommandWithItsLineAndDirectives(t *testing.T) {
	cmds, problems := parse("d.md", doc)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	type row struct {
		Line         int
		Run          string
		Excuse, Fail string
		Last         bool
		Block        int
	}
	var got []row
	for _, c := range cmds {
		got = append(got, row{c.line, c.run, c.excuse, c.wantFail, c.last, c.blockIndex})
	}
	want := []row{
		{4, "kubectl get pods   # a comment", "", "", false, 1},
		{6, "helm install x \\\n  --set a=b", "", "", false, 1},
		{8, "kubectl create -f - <<'EOF'\nkind: Pod\nEOF", "", "", false, 1},
		{16, "kubectl describe pod single", "", "", true, 2},
		{17, "kubectl exec single -- true", "no containers", "", true, 2},
		{20, "kubectl inspect gpushare --server https://127.0.0.1:1", "", "error: cannot reach the API server at https://127.0.0.1:1", false, 3},
		{22, "kubectl inspect gpushare", "", "", false, 3},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("commands (-want +got):\n%s", d)
	}
}

func TestParseReportsUnlabelledCommandsAndStaleDirectives(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"a command in a block without a language", "```\n$ kubectl get pods\n```\n", "d.md:2: a code block without a language holds a command"},
		{"a skip whose prefix matches no command", "<!-- docs-run: skip `helm`: x -->\n```sh\nkubectl get pods\n```\n", "d.md:1: the docs-run directive"},
		{"a sub that replaces nothing", "<!-- docs-run: sub `<node>` `n1` -->\n```sh\nkubectl get pods\n```\n", "applies to no command"},
		{"a directive not above a block", "<!-- docs-run: last -->\nprose\n```sh\nkubectl get pods\n```\n", "d.md:1: a docs-run directive must be directly above a code block"},
		{"an unknown directive", "<!-- docs-run: ignore -->\n```sh\nkubectl get pods\n```\n", `unknown docs-run directive "ignore"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := parse("d.md", tc.src)
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Errorf("problems %q, want one holding %q", problems, tc.want)
			}
		})
	}
	if _, problems := parse("d.md", "```text\nkubectl get pods\n```\n"); len(problems) > 0 {
		t.Errorf("a text block is not commands, got %q", problems)
	}
}

func TestRunReportsEachFailureAndKeepsTheBlocksShell(t *testing.T) {
	src := "```sh\n" +
		"export X=carried\n" + // 2
		"test \"$X\" = carried\n" + // 3
		"false | true\n" + // 4: pipefail
		"echo fine\n" + // 5
		"```\n" +
		"<!-- docs-run: fails `sh -c`: no such thing -->\n" +
		"```sh\n" +
		"sh -c 'echo no such thing >&2; exit 3'\n" + // 9
		"sh -c 'exit 4'\n" + // 10
		"```\n" +
		"```console\n" +
		"$ true\n" + // 13
		"error: it fails: the doc says\n" +
		"```\n"
	cmds, problems := parse("d.md", src)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	var failed []string
	for b, block := range groupBlocks(cmds) {
		results, err := runBlock(t.TempDir(), block, time.Minute)
		if err != nil {
			t.Fatalf("block %d: %v", b, err)
		}
		for k, c := range block {
			if v := verdict(c, results[k]); v != "" {
				failed = append(failed, c.file+":"+strconv.Itoa(c.line)+": "+v)
			}
		}
	}
	want := []string{
		"d.md:4: exited 1",
		`d.md:10: failed (exit 4), but without the doc's "no such thing"`,
		`d.md:13: succeeded, but the doc says it fails with "error: it fails"`,
	}
	if d := cmp.Diff(want, failed); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}

func TestSeveralDirectivesShareAComment(t *testing.T) {
	src := "<!-- docs-run: sub `<pod>` `p;1`; skip `kubectl exec`: no containers; fails `kubectl logs`: not found -->\n" +
		"```sh\nkubectl exec <pod> -- true\nkubectl logs <pod>\nkubectl get pod <pod>\n```\n"
	cmds, problems := parse("d.md", src)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	var got []string
	for _, c := range cmds {
		got = append(got, c.run+" / "+c.excuse+" / "+c.wantFail)
	}
	want := []string{"kubectl exec p;1 -- true / no containers / ", "kubectl logs p;1 /  / not found", "kubectl get pod p;1 /  / "}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
