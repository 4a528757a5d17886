package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Signed records. The extender signs each assignment with an HMAC-SHA256
// over everything in it but the signature (version, pod UID, node, unit,
// phase, and each container's name, card and units), with a key both the
// extender and the device plugins read from one Secret. A device plugin that
// has the key refuses an unsigned or badly signed record, so a record written
// by anyone without the key (a tenant, where the admission policies are not
// installed) gives no card. The plugin signs the records it corrects (phase,
// card) with the same key.
//
// Rotation: the Secret holds RecordKeyCurrent and, during a rotation,
// RecordKeyPrevious. Records are signed with the current key; either key
// verifies. docs/security.md has the procedure.
const (
	// RecordKeyCurrent is the file (Secret key) holding the signing key.
	RecordKeyCurrent = "current"
	// RecordKeyPrevious is the file holding the key being rotated out; optional.
	RecordKeyPrevious = "previous"
	// MinRecordKeyBytes is the shortest key accepted: 256 bits.
	MinRecordKeyBytes = 32
	// signaturePrefix names the algorithm in Assignment.Signature.
	signaturePrefix = "hmac-sha256:"
)

// ErrUnsigned is returned (wrapped) by RecordKeys.Verify for a record
// without a signature.
var ErrUnsigned = errors.New("the assignment record is not signed")

// ErrBadSignature is returned (wrapped) by RecordKeys.Verify for a record
// whose signature no key accepts.
var ErrBadSignature = errors.New("the assignment record's signature does not match")

// RecordKeys are the keys records are signed with (Current) and checked with
// (Current, then Previous). The zero value signs and checks nothing.
type RecordKeys struct {
	Current, Previous []byte
}

// Enabled reports whether there is a key.
func (k RecordKeys) Enabled() bool { return len(k.Current) > 0 }

// RecordKeyring gives the record keys in force at each use: the programs
// re-read a mounted Secret while they run (internal/recordkey), so a
// rotation takes effect without a restart. Take Keys once per decision.
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

// SignedByCurrent reports whether a carries the current key's signature
// (false with no key). A record that verifies but is not signed by the
// current key was signed by the previous one: the device plugin signs it
// again, so that the previous key can be dropped (docs/security.md,
// "Rotating the record key").
func (k RecordKeys) SignedByCurrent(a Assignment) bool {
	if !k.Enabled() {
		return false
	}
	return k.verifyWith(a, k.Current) == nil
}

// LoadRecordKeys reads the keys from dir (a mounted Secret): the file
// RecordKeyCurrent, required, and RecordKeyPrevious, optional. Surrounding
// whitespace is trimmed; each key must have at least MinRecordKeyBytes.
func LoadRecordKeys(dir string) (RecordKeys, error) {
	read := func(name string, required bool) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) && !required {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("record signing key: %w", err)
		}
		b = []byte(strings.TrimSpace(string(b)))
		if len(b) < MinRecordKeyBytes {
			return nil, fmt.Errorf("record signing key %s has %d bytes, want at least %d (e.g. head -c 48 /dev/urandom | base64)", filepath.Join(dir, name), len(b), MinRecordKeyBytes)
		}
		return b, nil
	}
	cur, err := read(RecordKeyCurrent, true)
	if err != nil {
		return RecordKeys{}, err
	}
	prev, err := read(RecordKeyPrevious, false)
	if err != nil {
		return RecordKeys{}, err
	}
	return RecordKeys{Current: cur, Previous: prev}, nil
}

// Sign returns a with its Signature set by the current key (unchanged when
// there is no key).
func (k RecordKeys) Sign(a Assignment) (Assignment, error) {
	if !k.Enabled() {
		return a, nil
	}
	mac, err := recordMAC(k.Current, a)
	if err != nil {
		return a, err
	}
	a.Signature = signaturePrefix + base64.RawURLEncoding.EncodeToString(mac)
	return a, nil
}

// Verify checks a's signature against the current, then the previous key.
// With no key it accepts every record. The errors say what to do.
func (k RecordKeys) Verify(a Assignment) error {
	if !k.Enabled() {
		return nil
	}
	if a.Signature == "" {
		return fmt.Errorf("%w: only the gpushare extender writes records, and it signs them; delete the pod and let the gpushare scheduler place it", ErrUnsigned)
	}
	var last error
	for _, key := range [][]byte{k.Current, k.Previous} {
		if len(key) == 0 {
			continue
		}
		if last = k.verifyWith(a, key); last == nil || !errors.Is(last, errMismatch) {
			return last
		}
	}
	return fmt.Errorf("%w: the record was changed after the extender wrote it, or the extender and this device plugin hold different keys (check the Secret both mount); delete the pod and let the gpushare scheduler place it", ErrBadSignature)
}

// errMismatch: a well-formed signature that key did not make.
var errMismatch = errors.New("signature mismatch")

// verifyWith checks a's signature against one key.
func (k RecordKeys) verifyWith(a Assignment, key []byte) error {
	enc, ok := strings.CutPrefix(a.Signature, signaturePrefix)
	got, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil {
		return fmt.Errorf("%w: signature %.24q… is not %s<base64url>", ErrBadSignature, a.Signature, signaturePrefix)
	}
	want, err := recordMAC(key, a)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, want) {
		return errMismatch
	}
	return nil
}

// recordMAC is the HMAC of a's encoding without its signature.
func recordMAC(key []byte, a Assignment) ([]byte, error) {
	a.Signature = ""
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("gpushare-assignment\x00"))
	m.Write(b)
	return m.Sum(nil), nil
}
