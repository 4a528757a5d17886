package api

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordSignatures(t *testing.T) {
	_, a := assignedPod()
	k1 := RecordKeys{Current: []byte(strings.Repeat("k", 32))}
	k2 := RecordKeys{Current: []byte(strings.Repeat("n", 32)), Previous: k1.Current}

	signed, err := k1.Sign(a)
	if err != nil || !strings.HasPrefix(signed.Signature, "hmac-sha256:") {
		t.Fatalf("Sign = %q, %v", signed.Signature, err)
	}
	if err := k1.Verify(signed); err != nil {
		t.Errorf("own signature: %v", err)
	}
	if err := k2.Verify(signed); err != nil {
		t.Errorf("signed with the key being rotated out: %v, want accepted", err)
	}
	if err := (RecordKeys{Current: k2.Current}).Verify(signed); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "hold different keys") {
		t.Errorf("after the rotation ends: %v, want ErrBadSignature saying keys may differ", err)
	}
	if err := k1.Verify(a); !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "delete the pod") {
		t.Errorf("unsigned: %v, want ErrUnsigned saying what to do", err)
	}
	if err := (RecordKeys{}).Verify(a); err != nil {
		t.Errorf("no key configured: %v, want every record accepted", err)
	}
	// Every field the plugin relies on is covered.
	tamper := map[string]func(*Assignment){
		"pod UID":    func(a *Assignment) { a.PodUID = "other" },
		"node":       func(a *Assignment) { a.Node = "n2" },
		"unit":       func(a *Assignment) { a.Unit = UnitMiB },
		"phase":      func(a *Assignment) { a.Phase = PhaseAllocated },
		"card":       func(a *Assignment) { a.Containers[0].CardUUID = "GPU-b" },
		"card index": func(a *Assignment) { a.Containers[0].CardIndex = 1 },
		"units":      func(a *Assignment) { a.Containers[0].Units = 40 },
		"container":  func(a *Assignment) { a.Containers = a.Containers[:1] },
		"version":    func(a *Assignment) { a.Version = 2 },
		"garbage":    func(a *Assignment) { a.Signature = "hmac-sha256:!!" },
	}
	for name, mutate := range tamper {
		b := signed
		b.Containers = append([]ContainerAssignment(nil), signed.Containers...)
		mutate(&b)
		if err := k1.Verify(b); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s changed after signing: %v, want ErrBadSignature", name, err)
		}
	}
	// The signature survives the annotation's encoding.
	s, err := EncodeAssignment(signed)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := k1.Verify(back); err != nil {
		t.Errorf("after encode/decode: %v", err)
	}
}

func TestLoadRecordKeys(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadRecordKeys(dir); err == nil || !strings.Contains(err.Error(), "current") {
		t.Errorf("no key file: %v, want an error naming it", err)
	}
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(RecordKeyCurrent, "short\n")
	if _, err := LoadRecordKeys(dir); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Errorf("short key: %v", err)
	}
	write(RecordKeyCurrent, strings.Repeat("c", 40)+"\n")
	k, err := LoadRecordKeys(dir)
	if err != nil || string(k.Current) != strings.Repeat("c", 40) || k.Previous != nil {
		t.Errorf("current only: %+v, %v", k, err)
	}
	write(RecordKeyPrevious, strings.Repeat("p", 32))
	if k, err := LoadRecordKeys(dir); err != nil || string(k.Previous) != strings.Repeat("p", 32) {
		t.Errorf("with previous: %+v, %v", k, err)
	}
}

// SignedByCurrent tells a record the device plugin must sign again during a
// rotation (signed by the previous key) from one already signed by the
// current key; a fixed RecordKeys is its own keyring, a nil ring has none.
func TestSignedByCurrentAndKeyrings(t *testing.T) {
	_, a := assignedPod()
	old := RecordKeys{Current: []byte(strings.Repeat("o", 32))}
	rotating := RecordKeys{Current: []byte(strings.Repeat("n", 32)), Previous: old.Current}
	byOld, err := old.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	byNew, err := rotating.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	if rotating.Verify(byOld) != nil || rotating.SignedByCurrent(byOld) {
		t.Errorf("a record signed by the previous key: verifies %v, SignedByCurrent %v; want verified, not by current", rotating.Verify(byOld), rotating.SignedByCurrent(byOld))
	}
	if !rotating.SignedByCurrent(byNew) {
		t.Error("a record signed by the current key: SignedByCurrent = false")
	}
	if (RecordKeys{}).SignedByCurrent(byNew) || rotating.SignedByCurrent(a) {
		t.Error("SignedByCurrent true without a key or without a signature")
	}
	if got := KeysOf(rotating); string(got.Current) != string(rotating.Current) {
		t.Error("KeysOf(RecordKeys) is not the keys themselves")
	}
	if KeysOf(nil).Enabled() {
		t.Error("KeysOf(nil) has a key")
	}
}
