package api

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Signed records (docs/security.md, "Signed records"). The extender signs each
// assignment with Ed25519 over everything in it but the signature; only it
// holds the private key, so a device plugin with the public key gives no card
// for a record anyone else wrote. A plugin signs its corrections with its own
// node key, published on its Node (AnnotationRecordKey); a node signature
// vouches for the record's Node only and verifies only with that Node's key.
// During a rotation RecordKeyPrevious verifies too; RecordKeyCurrent signs.
const (
	// RecordKeyCurrent is the file (Secret or ConfigMap key) holding the
	// extender's signing key (Secret: PKCS#8 PEM private key) or its public
	// half (ConfigMap: base64).
	RecordKeyCurrent = "current"
	// RecordKeyPrevious is the file holding the key being rotated out; optional.
	RecordKeyPrevious = "previous"
	// signaturePrefix names the algorithm in Assignment.Signature; the
	// signer (SignerExtender, SignerNode) follows it.
	signaturePrefix = "ed25519:"
	// SignerExtender marks a signature made by the extender's key.
	SignerExtender = "extender"
	// SignerNode marks a signature made by the key of the record's node.
	SignerNode = "node"
)

// ErrUnsigned is returned (wrapped) by RecordKeys.Verify for a record
// without a signature.
var ErrUnsigned = errors.New("the assignment record is not signed")

// ErrBadSignature is returned (wrapped) by RecordKeys.Verify for a record
// whose signature no key accepts.
var ErrBadSignature = errors.New("the assignment record's signature does not match")

// NodeKeys gives the record key each node publishes on its Node
// (AnnotationRecordKey); nil when the node publishes none.
type NodeKeys interface {
	NodeKey(node string) ed25519.PublicKey
}

// RecordKeys are the keys records are checked with and, where this program
// may sign, signed with. The zero value signs and checks nothing.
type RecordKeys struct {
	// Current and Previous are the public halves of the extender's keys:
	// extender-signed records verify with either.
	Current, Previous ed25519.PublicKey
	// Signer is the private key this program signs with: the extender's
	// current key, or a device plugin's node key (then Node is set).
	Signer ed25519.PrivateKey
	// Node, when set, is the node whose key Signer is: Sign marks records
	// as the node's, and refuses a record for another node.
	Node string
	// Nodes are the node keys node-signed records verify with (nil: none
	// verifies).
	Nodes NodeKeys
}

// Enabled reports whether records are signed and checked (there is an
// extender key).
func (k RecordKeys) Enabled() bool { return len(k.Current) > 0 }

// RecordKeyring gives the record keys in force at each use: the programs
// re-read their keys while they run (internal/recordkey), so a rotation
// takes effect without a restart. Take Keys once per decision.
type RecordKeyring interface {
	Keys() RecordKeys
}

// Keys makes a fixed set of keys a RecordKeyring.
func (k RecordKeys) Keys() RecordKeys { return k }

// KeysOf returns the keys ring has in force; a nil ring has none.
func KeysOf(ring RecordKeyring) RecordKeys {
	if ring == nil {
		return RecordKeys{}
	}
	return ring.Keys()
}

// SignedByCurrent reports whether a's signature needs no renewal: made by
// the extender's current key, or by the key its node publishes (no
// rotation of the extender's key retires it). False with no key. A record
// that verifies but is not signed so was signed by the extender's previous
// key: the device plugin signs it again, so that the previous key can be
// dropped (docs/security.md, "Rotating the record key").
func (k RecordKeys) SignedByCurrent(a Assignment) bool {
	if !k.Enabled() {
		return false
	}
	signer, sig, err := splitSignature(a.Signature)
	if err != nil {
		return false
	}
	if signer == SignerNode {
		return k.verifyNode(a, sig) == nil
	}
	return verifyWith(a, signer, sig, k.Current)
}

// NodeKeyAnnotation encodes a public key as AnnotationRecordKey holds it
// (and as the extender's public-key ConfigMap does): standard base64.
func NodeKeyAnnotation(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// ParsePublicKey reads a public key written by NodeKeyAnnotation.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("record public key %.16q… is not the base64 of a %d-byte Ed25519 public key", s, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParseKey reads one record key file: a PKCS#8 PEM Ed25519 private key
// (the extender's Secret; Helm's genPrivateKey "ed25519", or openssl genpkey
// -algorithm ed25519) gives the private key and its public half; a base64
// public key (the ConfigMap the extender publishes) gives the public key
// only.
func ParseKey(b []byte) (ed25519.PrivateKey, ed25519.PublicKey, error) {
	if block, _ := pem.Decode(b); block != nil {
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("not a PKCS#8 private key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, nil, fmt.Errorf("a %T, want an Ed25519 key (openssl genpkey -algorithm ed25519)", k)
		}
		return priv, priv.Public().(ed25519.PublicKey), nil
	}
	pub, err := ParsePublicKey(string(b))
	return nil, pub, err
}

// LoadRecordKeys reads the extender's keys from dir: the file
// RecordKeyCurrent, required, and RecordKeyPrevious, optional (ParseKey).
// A private current key (the extender's Secret) becomes Signer; public keys
// (the ConfigMap a device plugin reads) only verify.
func LoadRecordKeys(dir string) (RecordKeys, error) {
	files := map[string][]byte{}
	for _, name := range []string{RecordKeyCurrent, RecordKeyPrevious} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) && name == RecordKeyPrevious {
			continue
		}
		if err != nil {
			return RecordKeys{}, fmt.Errorf("record signing key: %w", err)
		}
		files[name] = b
	}
	k, err := RecordKeysFrom(files)
	if err != nil {
		return k, fmt.Errorf("%s: %w", dir, err)
	}
	return k, nil
}

// RecordKeysFrom reads the extender's keys from the contents of the files
// (or ConfigMap / Secret keys) RecordKeyCurrent, required, and
// RecordKeyPrevious, optional; empty contents count as absent.
func RecordKeysFrom(files map[string][]byte) (RecordKeys, error) {
	var k RecordKeys
	cur := files[RecordKeyCurrent]
	if len(strings.TrimSpace(string(cur))) == 0 {
		return k, fmt.Errorf("record signing key: no %q key (a PKCS#8 PEM Ed25519 private key, e.g. openssl genpkey -algorithm ed25519)", RecordKeyCurrent)
	}
	priv, pub, err := ParseKey(cur)
	if err != nil {
		return k, fmt.Errorf("record signing key %q: %w", RecordKeyCurrent, err)
	}
	k.Current, k.Signer = pub, priv
	if prev := files[RecordKeyPrevious]; len(strings.TrimSpace(string(prev))) > 0 {
		if _, k.Previous, err = ParseKey(prev); err != nil {
			return RecordKeys{}, fmt.Errorf("record signing key %q: %w", RecordKeyPrevious, err)
		}
	}
	return k, nil
}

// PublicOnly is k without its signing key: what the extender publishes.
func (k RecordKeys) PublicOnly() RecordKeys {
	return RecordKeys{Current: k.Current, Previous: k.Previous}
}

// Sign returns a with its Signature set by Signer (unchanged when records
// are not signed): as the extender's, or, with Node set, as that node's
// (refused for a record of another node).
func (k RecordKeys) Sign(a Assignment) (Assignment, error) {
	if !k.Enabled() {
		return a, nil
	}
	if len(k.Signer) != ed25519.PrivateKeySize {
		return a, errors.New("this program holds no record signing key")
	}
	signer := SignerExtender
	if k.Node != "" {
		if a.Node != k.Node {
			return a, fmt.Errorf("node %q signs records of its own pods only; this record is for node %q", k.Node, a.Node)
		}
		signer = SignerNode
	}
	sig := ed25519.Sign(k.Signer, message(a, signer))
	a.Signature = signaturePrefix + signer + ":" + base64.RawURLEncoding.EncodeToString(sig)
	return a, nil
}

// Verify checks a's signature: an extender signature against the current,
// then the previous extender key; a node signature against the key the
// record's node publishes. With no key it accepts every record. The errors
// say what to do.
func (k RecordKeys) Verify(a Assignment) error {
	if !k.Enabled() {
		return nil
	}
	if a.Signature == "" {
		return fmt.Errorf("%w: only the gpushare extender writes records, and it signs them; delete the pod and let the gpushare scheduler place it", ErrUnsigned)
	}
	signer, sig, err := splitSignature(a.Signature)
	if err != nil {
		return err
	}
	if signer == SignerNode {
		return k.verifyNode(a, sig)
	}
	for _, key := range []ed25519.PublicKey{k.Current, k.Previous} {
		if verifyWith(a, signer, sig, key) {
			return nil
		}
	}
	return fmt.Errorf("%w: the record was changed after the extender wrote it, or this program holds another extender public key than the extender's Secret (check the Secret and the public-key ConfigMap the extender writes); delete the pod and let the gpushare scheduler place it", ErrBadSignature)
}

// verifyNode checks a node signature against the key of the record's node.
func (k RecordKeys) verifyNode(a Assignment, sig []byte) error {
	var key ed25519.PublicKey
	if k.Nodes != nil {
		key = k.Nodes.NodeKey(a.Node)
	}
	if key == nil {
		return fmt.Errorf("%w: the record is signed as node %q's correction, and that node publishes no record key this program knows; its device plugin publishes one when it starts (delete the pod if the node has no device plugin)", ErrBadSignature, a.Node)
	}
	if !verifyWith(a, SignerNode, sig, key) {
		return fmt.Errorf("%w: the record is not signed by the key node %q publishes (a node's key vouches for that node's pods only); the node's device plugin rewrites it from the kubelet's account, or delete the pod", ErrBadSignature, a.Node)
	}
	return nil
}

// splitSignature parses "ed25519:<signer>:<base64url>".
func splitSignature(s string) (string, []byte, error) {
	rest, ok := strings.CutPrefix(s, signaturePrefix)
	signer, enc, ok2 := strings.Cut(rest, ":")
	sig, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || !ok2 || err != nil || (signer != SignerExtender && signer != SignerNode) || len(sig) != ed25519.SignatureSize {
		return "", nil, fmt.Errorf("%w: signature %.24q… is not %s{%s|%s}:<base64url>", ErrBadSignature, s, signaturePrefix, SignerExtender, SignerNode)
	}
	return signer, sig, nil
}

// verifyWith reports whether key made sig over a as signer.
func verifyWith(a Assignment, signer string, sig []byte, key ed25519.PublicKey) bool {
	if len(key) != ed25519.PublicKeySize {
		return false
	}
	return checkSignature(key, message(a, signer), sig)
}

// verified remembers the outcome of each signature check of a record in memory (Verify,
// SignedByCurrent: reconciliation looks at every record of the node each round; an Ed25519
// verification costs about 100 µs), keyed by the SHA-256 of key, signature and message.
// Reading records goes through TrustedAssignment's memory, which skips the encoding too.
var verified = newMemo[[sha256.Size]byte, bool](1 << 16)

func checkSignature(key ed25519.PublicKey, msg, sig []byte) bool {
	h := sha256.New()
	for _, b := range [][]byte{key, sig, msg} {
		_ = binary.Write(h, binary.BigEndian, uint32(len(b)))
		h.Write(b)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	if ok, seen := verified.get(k); seen {
		return ok
	}
	ok := ed25519.Verify(key, msg, sig)
	verified.put(k, ok)
	return ok
}

// material is what Verify depends on besides the record: the extender's keys
// and node's published key (when the keys know nodes' keys).
func (k RecordKeys) material(node string) (m [3 * ed25519.PublicKeySize]byte) {
	keys := [3]ed25519.PublicKey{k.Current, k.Previous}
	if k.Nodes != nil {
		keys[2] = k.Nodes.NodeKey(node)
	}
	for i, key := range keys {
		if len(key) == ed25519.PublicKeySize { // a key of another size verifies nothing
			copy(m[i*ed25519.PublicKeySize:], key)
		}
	}
	return m
}

// memo is a map shared by goroutines, at most max entries (it starts over when full).
type memo[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func newMemo[K comparable, V any](max int) *memo[K, V] { return &memo[K, V]{m: map[K]V{}, max: max} }

func (m *memo[K, V]) get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

func (m *memo[K, V]) put(k K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= m.max {
		clear(m.m)
	}
	m.m[k] = v
}

// message is what is signed: a domain tag, the signer, and a's encoding
// without its signature.
func message(a Assignment, signer string) []byte {
	a.Signature = ""
	b, err := json.Marshal(a)
	if err != nil {
		panic(err) // an Assignment of strings and integers always marshals
	}
	return append([]byte("gpushare-assignment\x00"+signer+"\x00"), b...)
}

// NodeKeyMap is a fixed set of node keys (NodeKeys): a device plugin
// knows its own node's key only.
type NodeKeyMap map[string]ed25519.PublicKey

// NodeKey returns node's key (NodeKeys).
func (m NodeKeyMap) NodeKey(node string) ed25519.PublicKey { return m[node] }
