package server

import (
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// encodeFilter is json.Marshal of the filter result without reflection and
// without sorting large maps: at 5,000 nodes the answer can hold ~5,000
// FailedNodes entries (every card too full), and encoding/json spent more
// time sorting and reflecting over them than the filter spent deciding.
// Node objects (nodeCacheCapable: false) go through encoding/json. The
// output decodes to r (TestEncodeFilter).
func encodeFilter(r *extenderv1.ExtenderFilterResult) ([]byte, error) {
	size := 128
	if r.NodeNames != nil {
		size += 24 * len(*r.NodeNames)
	}
	size += 96 * (len(r.FailedNodes) + len(r.FailedAndUnresolvableNodes))
	b := make([]byte, 0, size)
	b = append(b, `{"Nodes":`...)
	if r.Nodes == nil {
		b = append(b, "null"...)
	} else {
		nodes, err := json.Marshal(r.Nodes)
		if err != nil {
			return nil, err
		}
		b = append(b, nodes...)
	}
	b = append(b, `,"NodeNames":`...)
	if r.NodeNames == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, n := range *r.NodeNames {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, n)
		}
		b = append(b, ']')
	}
	b = append(b, `,"FailedNodes":`...)
	b = appendFailedNodes(b, r.FailedNodes)
	b = append(b, `,"FailedAndUnresolvableNodes":`...)
	b = appendFailedNodes(b, r.FailedAndUnresolvableNodes)
	b = append(b, `,"Error":`...)
	b = appendJSONString(b, r.Error)
	return append(b, '}'), nil
}

// appendFailedNodes writes m as one object, in no particular order (JSON
// objects are unordered); small ones are sorted so that small answers read
// well.
func appendFailedNodes(b []byte, m extenderv1.FailedNodesMap) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	first := true
	add := func(k, v string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, v)
	}
	if len(m) <= 64 {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add(k, m[k])
		}
	} else {
		for k, v := range m {
			add(k, v)
		}
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters, '"' and
// '\' are escaped; invalid UTF-8 becomes U+FFFD, as encoding/json does.
// ('<', '>' and '&' are left as they are: the output is not HTML.)
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// MaxReasonBytes bounds one node's reason in a filter answer: kube-scheduler
// keeps one per node for the pod's condition and events, so a long reason
// costs its length times the number of nodes on every retry.
const MaxReasonBytes = 512

// clipReason cuts a reason to MaxReasonBytes (at a rune boundary), saying
// how much was left out.
func clipReason(msg string) string {
	if len(msg) <= MaxReasonBytes {
		return msg
	}
	cut := MaxReasonBytes - 40
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", msg[:cut], len(msg)-cut)
}

// zeroScores is every named node at score 0, in order.
func zeroScores(names []string) extenderv1.HostPriorityList {
	out := make(extenderv1.HostPriorityList, len(names))
	for i, n := range names {
		out[i].Host = n
	}
	return out
}
