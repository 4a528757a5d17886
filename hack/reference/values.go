package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// maxValueKeys is the chart's budget of value keys (leaf keys: a map documented as one key
// counts its leaves). It only falls: a new program setting belongs in devicePlugin.config or
// scheduler.extender.config, not in a new key.
const maxValueKeys = 70

var (
	keyLine  = regexp.MustCompile(`^( *)([A-Za-z0-9_]+):(?: *(.*))?$`)
	typeHint = regexp.MustCompile(`^\((\w+)\) *`)
)

// valuesReference is the chart's values reference, from values.yaml: every key with its
// "# -- description" comment above it (continued by the "#" lines that follow), in the file's
// order. A map whose key has a "# --" comment is one key (its default the whole map); the keys
// of one without are listed one by one. It fails on a key without a description and on more
// than maxValueKeys keys.
func valuesReference(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(data), "\n")
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Chart values\n\n%s", header)
	b.WriteString("The values of `charts/gpushare` (`helm show values`), from the comments in `values.yaml`. The\n")
	b.WriteString("programs' settings beyond these are `devicePlugin.config` and `scheduler.extender.config`: fields\n")
	b.WriteString("of their configuration files (device-plugin-config.md, scheduler-config.md).\n\n")
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	var stack []string // key path by indentation level
	var indents []int
	var doc []string
	inDoc, keys := false, 0
	skipBelow := -1 // indentation under a map documented as one key
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if c, ok := strings.CutPrefix(trimmed, "# --"); ok && (c == "" || c[0] == ' ') {
			doc, inDoc = []string{strings.TrimSpace(c)}, true
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			if inDoc {
				doc = append(doc, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			}
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			inDoc = false
			continue
		}
		indent := len(m[1])
		if skipBelow >= 0 && indent > skipBelow {
			continue
		}
		skipBelow = -1
		for len(indents) > 0 && indents[len(indents)-1] >= indent {
			stack, indents = stack[:len(stack)-1], indents[:len(indents)-1]
		}
		key := strings.Join(append(append([]string{}, stack...), m[2]), ".")
		val := strings.TrimSpace(m[3])
		desc := strings.Join(doc, " ")
		doc, inDoc = nil, false
		if val == "" { // a map (or a list) written below the key
			if desc == "" {
				stack, indents = append(stack, m[2]), append(indents, indent)
				continue
			}
			block := []string{}
			for j := i + 1; j < len(lines) && (strings.TrimSpace(lines[j]) == "" || len(lines[j])-len(strings.TrimLeft(lines[j], " ")) > indent); j++ {
				if t := strings.TrimSpace(lines[j]); t != "" && !strings.HasPrefix(t, "#") {
					block = append(block, t)
				}
			}
			val, skipBelow = "{"+strings.Join(block, ", ")+"}", indent
			leaves := 0
			for _, l := range block {
				if m := keyLine.FindStringSubmatch(l); m != nil && m[3] != "" {
					leaves++
				}
			}
			if len(block) > 0 && strings.HasPrefix(block[0], "- ") {
				val, leaves = "["+strings.Join(block, " ")+"]", 1
			}
			keys += max(leaves, 1) - 1 // the map's leaf keys count, as values the operator sets
		}
		if desc == "" {
			return "", fmt.Errorf("%s: key %s has no \"# --\" description above it", path, key)
		}
		typ := valueType(val)
		if h := typeHint.FindStringSubmatch(desc); h != nil {
			typ, desc = h[1], desc[len(h[0]):]
		}
		keys++
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", key, typ, strings.ReplaceAll(val, "|", `\|`), strings.ReplaceAll(desc, "|", `\|`))
	}
	if keys > maxValueKeys {
		return "", fmt.Errorf("%s has %d keys; the chart's budget is %d (a program setting belongs in devicePlugin.config or scheduler.extender.config)", path, keys, maxValueKeys)
	}
	fmt.Fprintf(&b, "\n%d keys.\n", keys)
	return b.String(), nil
}

func valueType(v string) string {
	switch {
	case v == "true" || v == "false":
		return "bool"
	case strings.HasPrefix(v, "{"):
		return "object"
	case strings.HasPrefix(v, "["):
		return "list"
	case regexp.MustCompile(`^-?[0-9.]+$`).MatchString(v):
		return "number"
	}
	return "string"
}
