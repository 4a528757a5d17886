package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A command is one shell command a doc gives: a logical line of a ```sh block (continued by a
// trailing backslash or a here-document), or a "$ " line of a ```console block.
type command struct {
	file string
	line int    // the doc line the command starts on
	text string // as written, the lines joined by newlines
	run  string // what is run: text after the block's substitutions

	excuse     string // why it is not run on the playground ("" = it is run)
	wantFail   string // it must fail, its output holding this text ("" = it must succeed)
	last       bool   // run after every other command (it removes what they need)
	blockIndex int    // commands of one block run in one shell, in order
}

// directive is one <!-- docs-run: ... --> line above a code block.
type directive struct {
	line   int
	verb   string // skip, fails, sub, last
	prefix string // skip/fails: the commands it applies to (those starting with it; "" = all)
	arg    string // skip: the reason; fails: the text; sub: FROM
	to     string // sub: TO
	used   bool
}

var (
	fenceRE     = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_-]*)")
	directiveRE = regexp.MustCompile(`^<!-- docs-run: (.*) -->$`)
	// skip[ `PREFIX`]: REASON   fails[ `PREFIX`]: TEXT   sub `FROM` `TO`   last
	skipRE  = regexp.MustCompile("^(skip|fails)(?: `([^`]+)`)?: (.+)$")
	subRE   = regexp.MustCompile("^sub `([^`]+)` `([^`]*)`$")
	heredoc = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)
	// A line of an unlabelled block that reads like a command a user would type.
	commandLike = regexp.MustCompile(`^(\$ |kubectl |helm |make |hack/|bin/|gpushare-|go |curl |docker )`)
)

// shellInfo are the info strings of blocks whose lines are commands; consoleInfo's are "$ " lines
// followed by their output.
var shellInfo = map[string]bool{"sh": true, "shell": true, "bash": true}

const consoleInfo = "console"

// parse returns the commands of one markdown file, or the problems that keep it from being run:
// an unlabelled block of commands, a directive that names nothing or is not above a block.
func parse(file, src string) ([]command, []string) {
	var (
		cmds     []command
		problems []string
		pending  []*directive
		blocks   int
	)
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := directiveRE.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			for _, part := range splitDirectives(m[1]) {
				d, err := parseDirective(i+1, part)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %v", file, i+1, err))
					continue
				}
				pending = append(pending, d)
			}
			continue
		}
		m := fenceRE.FindStringSubmatch(l)
		if m == nil {
			if strings.TrimSpace(l) != "" && len(pending) > 0 {
				problems = append(problems, fmt.Sprintf("%s:%d: a docs-run directive must be directly above a code block", file, pending[0].line))
				pending = nil
			}
			continue
		}
		info, start := m[1], i+1
		var body []string
		for i++; i < len(lines) && !isClose(lines[i]); i++ {
			body = append(body, lines[i])
		}
		blocks++
		var bc []command
		switch {
		case shellInfo[info]:
			bc = shellCommands(file, start+1, body)
		case info == consoleInfo:
			bc = consoleCommands(file, start+1, body)
		case info == "":
			for j, b := range body {
				if commandLike.MatchString(b) {
					problems = append(problems, fmt.Sprintf("%s:%d: a code block without a language holds a command (%q): label it ```sh or ```console to have `make docs-run` run it on the playground, or ```text if it is not one to type",
						file, start+1+j, strings.TrimSpace(b)))
					break
				}
			}
		}
		for k := range bc {
			bc[k].blockIndex = blocks
		}
		problems = append(problems, apply(file, pending, bc)...)
		cmds = append(cmds, bc...)
		pending = nil
	}
	if len(pending) > 0 {
		problems = append(problems, fmt.Sprintf("%s:%d: a docs-run directive must be directly above a code block", file, pending[0].line))
	}
	return cmds, problems
}

// splitDirectives splits one comment's directives at the semicolons outside backticks.
func splitDirectives(s string) []string {
	var parts []string
	quoted, start := false, 0
	for i, r := range s {
		switch {
		case r == '`':
			quoted = !quoted
		case r == ';' && !quoted:
			parts, start = append(parts, strings.TrimSpace(s[start:i])), i+1
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// isClose reports whether l closes a code block: backticks alone.
func isClose(l string) bool {
	t := strings.TrimSpace(l)
	return strings.HasPrefix(t, "```") && strings.Trim(t, "`") == ""
}

func parseDirective(line int, s string) (*directive, error) {
	if s == "last" {
		return &directive{line: line, verb: "last"}, nil
	}
	if m := skipRE.FindStringSubmatch(s); m != nil {
		return &directive{line: line, verb: m[1], prefix: m[2], arg: m[3]}, nil
	}
	if m := subRE.FindStringSubmatch(s); m != nil {
		return &directive{line: line, verb: "sub", arg: m[1], to: m[2]}, nil
	}
	return nil, fmt.Errorf("unknown docs-run directive %q: want \"skip: REASON\", \"skip `PREFIX`: REASON\", \"fails[ `PREFIX`]: TEXT\", \"sub `FROM` `TO`\" or \"last\"", s)
}

// apply gives the block's commands its directives; a directive that applies to no command is a
// problem (the command it was written for changed).
func apply(file string, ds []*directive, cmds []command) []string {
	var problems []string
	for k := range cmds {
		c := &cmds[k]
		c.run = c.text
		for _, d := range ds {
			switch d.verb {
			case "last":
				c.last, d.used = true, true
			case "sub":
				if strings.Contains(c.run, d.arg) {
					c.run, d.used = strings.ReplaceAll(c.run, d.arg, d.to), true
				}
			case "skip", "fails":
				if !strings.HasPrefix(c.text, d.prefix) {
					continue
				}
				d.used = true
				if d.verb == "skip" {
					c.excuse = d.arg
				} else {
					c.wantFail = d.arg
				}
			}
		}
	}
	for _, d := range ds {
		if !d.used {
			problems = append(problems, fmt.Sprintf("%s:%d: the docs-run directive %q applies to no command of the block below it", file, d.line, d.verb+" "+d.prefix+d.arg))
		}
	}
	return problems
}

// shellCommands splits a ```sh block into commands: comment and blank lines dropped, a line
// ending in "\" continued, a here-document taken to its end word.
func shellCommands(file string, first int, body []string) []command {
	var cmds []command
	for j := 0; j < len(body); j++ {
		t := strings.TrimSpace(body[j])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		c := command{file: file, line: first + j, text: body[j]}
		for strings.HasSuffix(body[j], "\\") && j+1 < len(body) {
			j++
			c.text += "\n" + body[j]
		}
		if m := heredoc.FindStringSubmatch(body[j]); m != nil {
			for j+1 < len(body) {
				j++
				c.text += "\n" + body[j]
				if strings.TrimSpace(body[j]) == m[1] {
					break
				}
			}
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// consoleCommands takes the "$ " lines of a ```console block. A command whose shown output starts
// with "error:" must fail, its output holding the shown text up to the first ": " after it.
func consoleCommands(file string, first int, body []string) []command {
	var cmds []command
	for j := 0; j < len(body); j++ {
		if !strings.HasPrefix(body[j], "$ ") {
			continue
		}
		c := command{file: file, line: first + j, text: strings.TrimPrefix(body[j], "$ ")}
		if j+1 < len(body) && strings.HasPrefix(body[j+1], "error: ") {
			want := body[j+1]
			if k := strings.Index(want[len("error: "):], ": "); k >= 0 {
				want = want[:len("error: ")+k]
			}
			c.wantFail = want
		}
		cmds = append(cmds, c)
	}
	return cmds
}
