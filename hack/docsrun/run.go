package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runAll runs the commands not excused, block by block (the blocks marked last at the end), and
// returns how many failed, having printed each failure with its doc's file:line and output.
func runAll(cmds []command, timeout time.Duration, verbose bool) int {
	tmp, err := os.MkdirTemp("", "docs-run-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "docs-run: %v\n", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	failed := 0
	for b, block := range groupBlocks(cmds) {
		dir := filepath.Join(tmp, strconv.Itoa(b))
		if err := os.MkdirAll(filepath.Join(dir, "scratch"), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "docs-run: %v\n", err)
			os.Exit(2)
		}
		results, err := runBlock(dir, block, timeout)
		for k, c := range block {
			msg := verdict(c, results[k])
			if err != nil && results[k].rc < 0 {
				msg = err.Error()
			}
			if msg == "" {
				if verbose {
					fmt.Printf("docs-run: ok %s:%d: %s\n", c.file, c.line, firstLine(c.text))
				}
				continue
			}
			failed++
			fmt.Printf("docs-run: %s:%d: %s\n    %s\n", c.file, c.line, msg, strings.ReplaceAll(c.run, "\n", "\n    "))
			for _, l := range tail(results[k].out, 15) {
				fmt.Println("    | " + l)
			}
		}
	}
	return failed
}

// groupBlocks returns the commands to run, block by block, in order: the blocks marked last after
// every other.
func groupBlocks(cmds []command) [][]command {
	var blocks [][]command
	for _, last := range []bool{false, true} {
		var cur []command
		for _, c := range cmds {
			if c.excuse != "" || c.last != last {
				continue
			}
			if len(cur) > 0 && (cur[0].file != c.file || cur[0].blockIndex != c.blockIndex) {
				blocks, cur = append(blocks, cur), nil
			}
			cur = append(cur, c)
		}
		if len(cur) > 0 {
			blocks = append(blocks, cur)
		}
	}
	return blocks
}

type result struct {
	rc  int // -1: it did not run (the block ended first)
	out string
}

// verdict is "" when the command did what its doc says, else what went wrong.
func verdict(c command, r result) string {
	switch {
	case r.rc < 0:
		return "did not run"
	case c.wantFail == "" && r.rc != 0:
		return fmt.Sprintf("exited %d", r.rc)
	case c.wantFail != "" && r.rc == 0:
		return fmt.Sprintf("succeeded, but the doc says it fails with %q", c.wantFail)
	case c.wantFail != "" && !strings.Contains(r.out, c.wantFail):
		return fmt.Sprintf("failed (exit %d), but without the doc's %q", r.rc, c.wantFail)
	}
	return ""
}

// runBlock runs a block's commands in one bash, in order, each one's output and exit status into
// dir; a command that fails does not stop the next.
func runBlock(dir string, block []command, timeout time.Duration) ([]result, error) {
	var script strings.Builder
	script.WriteString("set -o pipefail\n")
	for k, c := range block {
		// A group, not a subshell: an export carries to the next command.
		fmt.Fprintf(&script, "{ %s\n} >%q 2>&1 </dev/null; echo $? >%q\n", c.run, filepath.Join(dir, fmt.Sprintf("%d.out", k)), filepath.Join(dir, fmt.Sprintf("%d.rc", k)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Env = append(os.Environ(), "DOCS_RUN_TMP="+filepath.Join(dir, "scratch"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("did not finish: the block's commands took over %s together", timeout)
	} else if err != nil {
		err = fmt.Errorf("the block's shell failed: %v: %s", err, out)
	}
	results := make([]result, len(block))
	for k := range block {
		results[k].rc = -1
		rc, rerr := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.rc", k)))
		o, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.out", k)))
		results[k].out = string(o)
		if n, perr := strconv.Atoi(strings.TrimSpace(string(rc))); rerr == nil && perr == nil {
			results[k].rc = n
		}
	}
	if err == nil && results[len(results)-1].rc < 0 {
		err = errors.New("did not run: the block's shell ended before it")
	}
	return results, err
}

func tail(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return lines
}
