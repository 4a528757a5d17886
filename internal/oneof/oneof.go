// Package oneof parses a value that must be one of a fixed set of names (a
// string-typed enumeration such as a memory unit or a strategy flag), with
// one wording for the error every program gives.
package oneof

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse returns s as a T when it is one of allowed, or an error naming what
// s was meant to be and listing the allowed values in the order given:
//
//	Parse("memory unit", "KiB", UnitGiB, UnitMiB)
//	// unknown memory unit "KiB": use "GiB" or "MiB"
func Parse[T ~string](what, s string, allowed ...T) (T, error) {
	if i := slices.Index(allowed, T(s)); i >= 0 {
		return allowed[i], nil
	}
	return "", fmt.Errorf("unknown %s %q: use %s", what, s, list(allowed))
}

// list quotes the values and joins them as people read a choice:
// `"a"`, `"a" or "b"`, `"a", "b" or "c"`.
func list[T ~string](values []T) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(string(v))
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
