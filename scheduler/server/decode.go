package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/scheduler/allocator"
)

// bodyPool recycles request body buffers (a 5,000-node filter body is
// ~100 kB).
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// decodeArgs reads a filter or prioritize body into args. It is decode's
// result, faster: kube-scheduler sends every candidate node's name in each
// call (5,000 at 5,000 nodes with percentageOfNodesToScore: 100), and
// encoding/json scans the body twice and reflects over each name. The
// common shape (one object, plain keys, NodeNames of plain ASCII strings)
// is parsed by hand (fastArgs), the Pod and Nodes values by encoding/json;
// any other body goes to encoding/json whole, so what is accepted, what it
// decodes to and every error message are decode's (FuzzDecodeArgs compares
// the two).
//
// When the body takes the fast path with NodeNames, the names are resolved
// against the cache as they are parsed (nameResolver): cands.snaps[i] is
// NodeNames[i]'s snapshot (nil for a node the cache does not know) and
// cands.ids[i] its ID, and a known node's name is the cache's own string,
// not a copy of the body's bytes. cands is zero otherwise; hand it back
// with s.putCandidates once the call is answered.
func (s *Server) decodeArgs(c *gin.Context, args *extenderv1.ExtenderArgs) (cands candidates, err error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= int(s.maxBody) {
			buf.Reset()
			bodyPool.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(c.Writer, c.Request.Body, s.maxBody)); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return candidates{}, fmt.Errorf("request body over %d bytes: %w", s.maxBody, err)
		}
		return candidates{}, fmt.Errorf("%w: reading the body: %v", ErrBadRequest, err)
	}
	r := nameResolver{cache: s.cache, snapPool: &s.snapPool, idPool: &s.idPool}
	err = decodeArgsBytes(buf.Bytes(), args, &r)
	if err != nil || args.NodeNames == nil {
		s.putCandidates(r.cands)
		return candidates{}, err
	}
	return r.cands, nil
}

// candidates are a call's node names as the decoder resolved them against
// the cache: snaps[i] is the i-th name's snapshot (nil: unknown), ids[i]
// its ID. The zero value: not resolved (a body decoded by encoding/json, a
// call from Go), and evaluate reads the snapshots itself.
type candidates struct {
	snaps []*allocator.Node
	ids   []int32
}

// putCandidates hands c's slices back to their pools.
func (s *Server) putCandidates(c candidates) {
	s.snapPool.put(c.snaps)
	s.idPool.put(c.ids)
}

// nameResolver resolves the node names fastArgs parses against the cache
// in one pass, under one lock (Cache.SnapshotsOf): the snapshots come out
// with the names, and the names are the snapshots' own strings. At 5,000
// nodes the names were a 60 kB copy of the body a call, most of the
// extender's garbage under a burst (docs/design.md, "Garbage collection and
// the 5,000-node p99").
type nameResolver struct {
	cache    Cache
	snapPool *slicePool[*allocator.Node]
	idPool   *slicePool[int32]
	// cands is the result: the last NodeNames array parsed, resolved.
	cands candidates
}

// spanPool recycles the names' offsets in the body (two a name).
var spanPool slicePool[uint32]

// resolve returns the n names whose bounds in b are spans (start, end
// pairs): a known node's is its snapshot's name, an unknown one's a copy.
func (r *nameResolver) resolve(b []byte, spans []uint32, n int) []string {
	r.release() // a repeated NodeNames key: fastArgs refuses it, but keep no slice twice
	r.cands = candidates{snaps: r.snapPool.get(n), ids: r.idPool.get(n)}
	out := namesPool.get(n)
	name := func(i int) []byte { return b[spans[2*i]:spans[2*i+1]] }
	r.cache.SnapshotsOf(r.cands.snaps, out, r.cands.ids, name)
	for i, sn := range r.cands.snaps {
		if sn == nil {
			out[i] = string(name(i))
		}
	}
	return out
}

// release hands back the slices of the names resolved so far.
func (r *nameResolver) release() {
	r.snapPool.put(r.cands.snaps)
	r.idPool.put(r.cands.ids)
	r.cands = candidates{}
}

// decodeArgsBytes is decodeArgs on a body already read. r, if not nil,
// resolves NodeNames on the fast path.
func decodeArgsBytes(b []byte, args *extenderv1.ExtenderArgs, r *nameResolver) error {
	var fast extenderv1.ExtenderArgs
	if fastArgs(b, &fast, r) {
		*args = fast
		return nil
	}
	if r != nil {
		r.release()
	}
	return decodeJSON(bytes.NewReader(b), args)
}

// decodeJSON is encoding/json's decoding of one JSON value from r into v,
// with decode's errors.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return fmt.Errorf("%w: malformed JSON: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", ErrBadRequest)
	}
	return nil
}

// fastArgs parses b into args when b is an object whose keys are plain
// (no escapes), each at most once, and whose NodeNames, if present, is null
// or an array of plain printable-ASCII strings; Pod and Nodes are decoded by
// encoding/json from their own bytes, other keys are checked valid and
// ignored (as encoding/json ignores unknown fields; it matches field names
// case-insensitively, and so does this). It returns false, leaving args in
// any state, for every other body. r, if not nil, resolves the names.
func fastArgs(b []byte, args *extenderv1.ExtenderArgs, r *nameResolver) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	var seenPod, seenNodes, seenNames bool
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return false
		}
		key := b[i+1 : i+1+end]
		for _, c := range key {
			if c == '\\' || c < 0x20 || c >= 0x80 {
				return false
			}
		}
		i = skipSpace(b, i+2+end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		start := i
		k := string(key)
		switch {
		case strings.EqualFold(k, "NodeNames"):
			if seenNames {
				return false
			}
			seenNames = true
			var ok bool
			if i, ok = parseNames(b, i, &args.NodeNames, r); !ok {
				return false
			}
		case strings.EqualFold(k, "Pod"), strings.EqualFold(k, "Nodes"):
			isPod := strings.EqualFold(k, "Pod")
			if (isPod && seenPod) || (!isPod && seenNodes) {
				return false
			}
			if i = skipValue(b, i); i < 0 {
				return false
			}
			var err error
			if isPod {
				seenPod = true
				err = json.Unmarshal(b[start:i], &args.Pod)
			} else {
				seenNodes = true
				err = json.Unmarshal(b[start:i], &args.Nodes)
			}
			if err != nil {
				return false
			}
		default:
			if i = skipValue(b, i); i < 0 || !json.Valid(b[start:i]) {
				return false
			}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// parseNames parses null or an array of plain printable-ASCII strings at
// b[i:] into *names and returns the position after it. With r the names
// are resolved (nameResolver.resolve); without, they share one string, a
// copy of the array's bytes: one allocation however many names (5,000 at
// 5,000 nodes), not one each. They are read for one call and let go with
// its answer.
func parseNames(b []byte, i int, names **[]string, r *nameResolver) (int, bool) {
	if bytes.HasPrefix(b[i:], []byte("null")) {
		*names = nil
		return i + 4, true
	}
	var out []string
	if r != nil && len(b) <= math.MaxUint32 {
		// One pass: the spans slice from the pool has the room of the
		// calls before.
		spans := spanPool.get(0)
		end, n, ok := scanNames(b, i, func(s, e int) { spans = append(spans, uint32(s), uint32(e)) })
		if !ok {
			spanPool.put(spans)
			return 0, false
		}
		out = r.resolve(b, spans, n)
		*names = &out
		spanPool.put(spans)
		return end, true
	}
	end, n, ok := scanNames(b, i, nil)
	if !ok {
		return 0, false
	}
	all := string(b[i:end])
	out = getNames(n)
	scanNames(all, 0, func(s, e int) { out = append(out, all[s:e]) })
	*names = &out
	return end, true
}

// namesPool recycles the decoded node-name slices (80 kB a call at 5,000
// nodes): a handler hands its request's back with releaseNames once its
// answer is written.
var namesPool slicePool[string]

func getNames(n int) []string { return namesPool.get(n)[:0] }

// releaseNames returns args.NodeNames to the pool. Nothing may use them
// afterwards: call it only when the answer has been written.
func releaseNames(args *extenderv1.ExtenderArgs) {
	if args.NodeNames == nil {
		return
	}
	namesPool.put(*args.NodeNames)
	args.NodeNames = nil
}

// plainNameByte holds for the bytes a plain name string may hold: printable
// ASCII but '"' and '\\'. One load a byte: the check runs over every byte of
// every candidate's name in every call.
var plainNameByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanNames checks that b[i:] starts with an array of plain printable-ASCII
// strings, calls emit (if not nil) with each string's bounds (quotes left
// out), and returns the position after the array and how many strings it
// holds.
func scanNames[T string | []byte](b T, i int, emit func(s, e int)) (end, n int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, 0, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		j := i + 1
		for j < len(b) && plainNameByte[b[j]] {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			return 0, 0, false
		}
		if emit != nil {
			emit(i+1, j)
		}
		n++
		i = skipSpace(b, j+1)
		if i >= len(b) {
			return 0, 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1, n, true
		default:
			return 0, 0, false
		}
	}
}

// skipValue returns the position just after the JSON value starting at
// b[i] (an object or array with its nesting, a string with its escapes, or
// a literal or number up to the next delimiter), or -1. It does not check
// the value is valid JSON: its caller does.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return -1
			}
			depth--
			i++
		default:
			if depth == 0 {
				// A literal or number: up to the next delimiter.
				j := i
				for j < len(b) && !isDelim(b[j]) {
					j++
				}
				if j == i {
					return -1
				}
				return j
			}
			i++
		}
		if depth == 0 {
			return i
		}
	}
	return -1
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
		return true
	}
	return false
}

func skipSpace[T string | []byte](b T, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// candidateNames returns the names of the candidate nodes, from NodeNames
// (nodeCacheCapable: true) or Nodes (false).
func candidateNames(args *extenderv1.ExtenderArgs) ([]string, error) {
	switch {
	case args.NodeNames != nil:
		return *args.NodeNames, nil
	case args.Nodes != nil:
		names := make([]string, len(args.Nodes.Items))
		for i := range args.Nodes.Items {
			names[i] = args.Nodes.Items[i].Name
		}
		return names, nil
	}
	return nil, fmt.Errorf("%w: neither NodeNames nor Nodes is set", ErrBadRequest)
}
