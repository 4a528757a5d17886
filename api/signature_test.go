package api

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// extenderKeys is the extender's key set from a one-byte seed.
func extenderKeys(seed byte) RecordKeys {
	priv := ed25519.NewKeyFromSeed(make32(seed))
	return RecordKeys{Current: priv.Public().(ed25519.PublicKey), Signer: priv}
}

// nodeSigner is node's plugin keys: the extender's public keys, its own
// node key as Signer and as the only node key it knows.
func nodeSigner(ext RecordKeys, node string, seed byte) RecordKeys {
	priv := ed25519.NewKeyFromSeed(make32(seed))
	k := ext.PublicOnly()
	k.Signer, k.Node = priv, node
	k.Nodes = NodeKeyMap{node: priv.Public().(ed25519.PublicKey)}
	return k
}

func make32(seed byte) []byte {
	b := make([]byte, ed25519.SeedSize)
	for i := range b {
		b[i] = seed
	}
	return b
}

func TestRecordSignatures(t *testing.T) {
	_, a := assignedPod()
	k1 := extenderKeys(1)
	k2 := extenderKeys(2)
	k2.Previous = k1.Current

	signed, err := k1.Sign(a)
	if err != nil || !strings.HasPrefix(signed.Signature, "ed25519:extender:") {
		t.Fatalf("Sign = %q, %v", signed.Signature, err)
	}
	if err := k1.PublicOnly().Verify(signed); err != nil {
		t.Errorf("own signature, public key only: %v", err)
	}
	if err := k2.Verify(signed); err != nil {
		t.Errorf("signed with the key being rotated out: %v, want accepted", err)
	}
	if err := (RecordKeys{Current: k2.Current}).Verify(signed); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "delete the pod") {
		t.Errorf("after the rotation ends: %v, want ErrBadSignature saying what to do", err)
	}
	if err := k1.Verify(a); !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "delete the pod") {
		t.Errorf("unsigned: %v, want ErrUnsigned saying what to do", err)
	}
	if err := (RecordKeys{}).Verify(a); err != nil {
		t.Errorf("no key configured: %v, want every record accepted", err)
	}
	if _, err := k1.PublicOnly().Sign(a); err == nil {
		t.Error("a program with only the public key signed a record")
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
		"garbage":    func(a *Assignment) { a.Signature = "ed25519:extender:!!" },
		"as node":    func(a *Assignment) { a.Signature = strings.Replace(a.Signature, ":extender:", ":node:", 1) },
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

// A node's key vouches for records of its own node only, and only as the
// key that node publishes.
func TestNodeSignatures(t *testing.T) {
	pod, a := assignedPod() // bound to n1
	ext := extenderKeys(1)
	n1 := nodeSigner(ext, "n1", 11)
	n2 := nodeSigner(ext, "n2", 12)
	// The extender's view: both nodes' published keys.
	published := NodeKeyMap{"n1": n1.Nodes.NodeKey("n1"), "n2": n2.Nodes.NodeKey("n2")}
	verifier := ext.PublicOnly()
	verifier.Nodes = published

	own, err := n1.Sign(a)
	if err != nil || !strings.HasPrefix(own.Signature, "ed25519:node:") {
		t.Fatalf("node n1 signing its own record: %q, %v", own.Signature, err)
	}
	for name, k := range map[string]RecordKeys{"the node itself": n1, "the extender": verifier} {
		if err := k.Verify(own); err != nil {
			t.Errorf("%s: n1's correction of its own record: %v, want trusted", name, err)
		}
		if !k.SignedByCurrent(own) {
			t.Errorf("%s: a node-signed record needs no re-signing after an extender rotation", name)
		}
	}
	if _, err := trusted(pod, verifier, own); err != nil {
		t.Errorf("TrustedAssignment of n1's own correction: %v", err)
	}

	// n1 refuses to sign for another node; a compromised n1 signing anyway
	// (its key, the record's node n2) is refused by everyone.
	forB := a
	forB.Node = "n2"
	if _, err := n1.Sign(forB); err == nil || !strings.Contains(err.Error(), "own pods only") {
		t.Errorf("n1 signing a record for n2: %v, want refused", err)
	}
	rogue := n1
	rogue.Node = "n2" // root on n1 can run any code with n1's key
	forged, err := rogue.Sign(forB)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]RecordKeys{"node n2": n2, "the extender": verifier} {
		if err := k.Verify(forged); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), `node "n2"`) {
			t.Errorf("%s: a record for n2 signed with n1's key: %v, want ErrBadSignature naming n2", name, err)
		}
	}
	// A node whose key is not published: its corrections are not trusted.
	if err := ext.PublicOnly().Verify(own); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "publishes no record key") {
		t.Errorf("no published node key: %v, want ErrBadSignature saying so", err)
	}
	// The pod's binding decides: a node-signed record for n1 on a pod bound
	// to n2 does not match the pod.
	moved := pod.DeepCopy()
	moved.Spec.NodeName = "n2"
	if _, err := trusted(moved, verifier, own); err == nil {
		t.Error("n1's record trusted on a pod bound to n2")
	}
}

// trusted puts a in pod's annotation and reads it back through
// Names.TrustedAssignment with k.
func trusted(pod *corev1.Pod, k RecordKeys, a Assignment) (Assignment, error) {
	raw, err := EncodeAssignment(a)
	if err != nil {
		return a, err
	}
	pod = pod.DeepCopy()
	pod.Annotations = map[string]string{DefaultNames().AnnotationAssignment(): raw}
	return DefaultNames().TrustedAssignment(pod, k)
}

func TestLoadRecordKeys(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadRecordKeys(dir); err == nil || !strings.Contains(err.Error(), "current") {
		t.Errorf("no key file: %v, want an error naming it", err)
	}
	write := func(name string, v []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(RecordKeyCurrent, []byte("short\n"))
	if _, err := LoadRecordKeys(dir); err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Errorf("not a key: %v", err)
	}
	cur, prev := extenderKeys(3), extenderKeys(4)
	write(RecordKeyCurrent, encodePrivateKey(cur.Signer))
	k, err := LoadRecordKeys(dir)
	if err != nil || !k.Current.Equal(cur.Current) || !k.Signer.Equal(cur.Signer) || k.Previous != nil {
		t.Errorf("current only: %+v, %v", k, err)
	}
	write(RecordKeyPrevious, encodePrivateKey(prev.Signer))
	if k, err := LoadRecordKeys(dir); err != nil || !k.Previous.Equal(prev.Current) {
		t.Errorf("with previous: %+v, %v", k, err)
	}
	// The published form: public keys only.
	write(RecordKeyCurrent, []byte(NodeKeyAnnotation(cur.Current)+"\n"))
	write(RecordKeyPrevious, []byte(NodeKeyAnnotation(prev.Current)))
	if k, err := LoadRecordKeys(dir); err != nil || !k.Current.Equal(cur.Current) || k.Signer != nil || !k.Previous.Equal(prev.Current) {
		t.Errorf("public keys: %+v, %v", k, err)
	}
}

// SignedByCurrent tells a record the device plugin must sign again during a
// rotation (signed by the previous key) from one already signed by the
// current key; a fixed RecordKeys is its own keyring, a nil ring has none.
func TestSignedByCurrentAndKeyrings(t *testing.T) {
	_, a := assignedPod()
	old := extenderKeys(5)
	rotating := extenderKeys(6)
	rotating.Previous = old.Current
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
	if got := KeysOf(rotating); !got.Current.Equal(rotating.Current) {
		t.Error("KeysOf(RecordKeys) is not the keys themselves")
	}
	if KeysOf(nil).Enabled() {
		t.Error("KeysOf(nil) has a key")
	}
}

// A record verified once is not checked again by the same keys, and the
// memory of it never vouches for it under other keys: an extender key rotated
// out, another node key, or a record changed by one byte.
func TestTrustedAssignmentChecksARecordOnce(t *testing.T) {
	pod, a := assignedPod() // bound to n1
	ext, other := extenderKeys(21), extenderKeys(22)
	signed, err := ext.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trusted(pod, ext.PublicOnly(), signed); err != nil {
		t.Fatalf("first read: %v", err)
	}
	raw, _ := EncodeAssignment(signed)
	pod.Annotations = map[string]string{DefaultNames().AnnotationAssignment(): raw}
	// A repeated read costs a copy of the record (no encoding, hashing or
	// signature check: each of those allocates).
	if n := testing.AllocsPerRun(50, func() { _, _ = DefaultNames().TrustedAssignment(pod, ext.PublicOnly()) }); n > 5 {
		t.Errorf("a repeated read of a verified record makes %.0f allocations, want at most 5 (the record is checked again)", n)
	}
	if _, err := trusted(pod, other.PublicOnly(), signed); !errors.Is(err, ErrBadSignature) {
		t.Errorf("the record under keys that never signed it, after it was verified under its own: %v, want ErrBadSignature", err)
	}
	changed := signed
	changed.Containers = append([]ContainerAssignment(nil), signed.Containers...)
	changed.Containers[0].CardUUID = "GPU-b"
	if _, err := trusted(pod, ext.PublicOnly(), changed); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed record with the verified one's signature: %v, want ErrBadSignature", err)
	}

	n1 := nodeSigner(ext, "n1", 23)
	own, err := n1.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trusted(pod, n1, own); err != nil {
		t.Fatalf("n1's correction, read by n1: %v", err)
	}
	republished := n1
	republished.Nodes = NodeKeyMap{"n1": other.Current} // n1 now publishes another key
	if _, err := trusted(pod, republished, own); !errors.Is(err, ErrBadSignature) {
		t.Errorf("n1's correction after n1 published another key: %v, want ErrBadSignature", err)
	}
}

// BenchmarkTrustedAssignment is one read of a signed record already read
// (the device plugin reads every record of its node at each kubelet call).
func BenchmarkTrustedAssignment(b *testing.B) {
	pod, a := assignedPod()
	k := extenderKeys(31)
	signed, err := k.Sign(a)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := EncodeAssignment(signed)
	pod.Annotations = map[string]string{DefaultNames().AnnotationAssignment(): raw}
	for b.Loop() {
		if _, err := DefaultNames().TrustedAssignment(pod, k.PublicOnly()); err != nil {
			b.Fatal(err)
		}
	}
}

// encodePrivateKey is priv as ParseKey reads it (PKCS#8 PEM), as the
// extender's Secret holds it (podtest.EncodePrivateKey outside this package).
func encodePrivateKey(priv ed25519.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
