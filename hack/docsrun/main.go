// Command docsrun runs the shell commands the user docs give (README.md, docs/*.md) on a live
// playground and fails with the doc's file:line when one fails (make docs-run, which brings the
// playground up on its own state dir and ports: hack/docs-run.sh).
//
// The commands are the lines of ```sh blocks (a trailing "\" or a here-document continues one)
// and the "$ " lines of ```console blocks; a console command whose shown output starts with
// "error:" must fail with that error. A code block without a language that holds a command is an
// error: label it sh or console (run) or text (not a command). Commands in inline code spans of
// the prose are not run (docs-check checks the make targets and flags they name). So a new
// command in a block runs by default; one that cannot run on the playground is excused in the
// doc's source, by an HTML comment directly above its block, which the rendered page does not show:
//
//	<!-- docs-run: skip: REASON -->              every command of the block is excused
//	<!-- docs-run: skip `PREFIX`: REASON -->     those starting with PREFIX
//	<!-- docs-run: fails `PREFIX`: TEXT -->      it must fail, its output holding TEXT
//	<!-- docs-run: sub `FROM` `TO` -->           a placeholder (<pod>) replaced before running
//	<!-- docs-run: last -->                      run after every other block (it removes things)
//
// Several directives may share one comment, separated by semicolons (outside backticks). A
// directive that applies to no command of its block is an error too. The commands of one
// block run in order in one bash (so an export carries to the next), in the repository root,
// with the environment given (KUBECONFIG, PATH), DOCS_RUN_TMP a scratch folder and the default
// playground's state dir (/tmp/gpushare-playground) replaced by $GPUSHARE_PLAYGROUND.
//
//	go run ./hack/docsrun -check     # only the labels and directives (make docs-check)
//	go run ./hack/docsrun -list      # every command: run, or excused and why
//	go run ./hack/docsrun [FILE...]  # run them (default: README.md docs/*.md)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// defaultPlayground is the state dir the docs name; the runner's playground replaces it.
const defaultPlayground = "/tmp/gpushare-playground"

func main() {
	check := flag.Bool("check", false, "only check the blocks' labels and the directives; run nothing")
	list := flag.Bool("list", false, "print every command and whether it runs; run nothing")
	verbose := flag.Bool("v", false, "print each command as it passes")
	timeout := flag.Duration("block-timeout", 5*time.Minute, "the most one block's commands may take together")
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		more, _ := filepath.Glob("docs/*.md")
		sort.Strings(more)
		files = append([]string{"README.md"}, more...)
	}
	var cmds []command
	var problems []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "docs-run: %v\n", err)
			os.Exit(2)
		}
		c, p := parse(f, string(src))
		cmds, problems = append(cmds, c...), append(problems, p...)
	}
	for _, p := range problems {
		fmt.Println("docs-run: " + p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	if pg := os.Getenv("GPUSHARE_PLAYGROUND"); pg != "" {
		for k := range cmds {
			cmds[k].run = strings.ReplaceAll(cmds[k].run, defaultPlayground, pg)
		}
	}
	runnable, excused := count(cmds)
	switch {
	case *check:
		fmt.Printf("docs-run: %d files: %d commands to run on the playground, %d excused in the docs' source\n", len(files), runnable, excused)
		return
	case *list:
		for _, c := range cmds {
			state := "run"
			switch {
			case c.excuse != "":
				state = "excused: " + c.excuse
			case c.wantFail != "":
				state = "run, must fail with " + fmt.Sprintf("%q", c.wantFail)
			}
			fmt.Printf("%s:%d: %s\n    %s\n", c.file, c.line, firstLine(c.text), state)
		}
		fmt.Printf("%d commands: %d run, %d excused\n", len(cmds), runnable, excused)
		return
	}
	failed := runAll(cmds, *timeout, *verbose)
	if failed > 0 {
		fmt.Printf("docs-run: %d of %d commands failed (%d excused in the docs' source); fix the doc or the product\n", failed, runnable, excused)
		os.Exit(1)
	}
	fmt.Printf("docs-run: %d files: the %d commands they give ran on the playground as the docs say; %d excused in the docs' source\n", len(files), runnable, excused)
}

func count(cmds []command) (runnable, excused int) {
	for _, c := range cmds {
		if c.excuse != "" {
			excused++
		} else {
			runnable++
		}
	}
	return runnable, excused
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
