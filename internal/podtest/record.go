package podtest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// Assign writes a valid assignment for the pod's node (set Node first, or
// use AssignOn): the i-th container asking for gpu-mem on cards[i].
func (b *Builder) Assign(phase api.AssignmentPhase, cards ...Card) *Builder {
	return b.AssignWhole(phase, cards, nil)
}

// AssignOn binds the pod to node and writes a valid assignment that puts
// each container asking for gpu-mem, in order, on the card of node with the
// given index (CardsOn).
func (b *Builder) AssignOn(node string, phase api.AssignmentPhase, indexes ...int) *Builder {
	return b.Node(node).Assign(phase, CardsOn(node, indexes...)...)
}

// AssignWhole writes a valid assignment for the pod's node: the i-th
// container asking for gpu-mem on shares[i], and the containers asking for
// whole cards, in order, on consecutive cards of whole.
func (b *Builder) AssignWhole(phase api.AssignmentPhase, shares, whole []Card) *Builder {
	return b.Annotation(api.DefaultNames().AnnotationAssignment(), MustEncode(Record(&b.pod, b.pod.Spec.NodeName, phase, shares, whole)))
}

// AssignWholeOn binds the pod to node and writes AssignWhole's record with
// the cards of node with the given indexes (CardsOn).
func (b *Builder) AssignWholeOn(node string, phase api.AssignmentPhase, shares, whole []int) *Builder {
	return b.Node(node).AssignWhole(phase, CardsOn(node, shares...), CardsOn(node, whole...))
}

// Sign signs the pod's assignment with keys, as the extender does.
func (b *Builder) Sign(keys api.RecordKeys) *Builder {
	return b.EditAssignment(func(a *api.Assignment) {
		signed, err := keys.Sign(*a)
		if err != nil {
			panic(err)
		}
		*a = signed
	})
}

// EditAssignment changes the pod's assignment with edit (e.g. a record
// granting other units than the pod asks for, or tampered with after
// signing); the result must still be a valid record.
func (b *Builder) EditAssignment(edit func(*api.Assignment)) *Builder {
	key := api.DefaultNames().AnnotationAssignment()
	a, err := api.DecodeAssignment(b.pod.Annotations[key])
	if err != nil {
		panic(err)
	}
	edit(&a)
	return b.Annotation(key, MustEncode(a))
}

// Record builds the assignment of pod on node, in unit GiB: its containers
// asking for gpu-mem, in spec order, on shares[i]; its containers asking for
// whole cards, in spec order, on consecutive cards of whole. The pod's
// request must be valid and the cards must match it.
func Record(pod *corev1.Pod, node string, phase api.AssignmentPhase, shares, whole []Card) api.Assignment {
	req := Request(pod)
	if len(shares) != len(req.Containers) {
		panic(fmt.Sprintf("pod %s: %d containers ask for gpu-mem, %d cards given", pod.Name, len(req.Containers), len(shares)))
	}
	a := api.Assignment{Version: api.AssignmentVersion, PodUID: pod.UID, Node: node, Unit: api.UnitGiB, Phase: phase}
	for i, c := range req.Containers {
		a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.Name, CardUUID: shares[i].UUID, CardIndex: shares[i].Index, Units: c.Units})
	}
	for _, w := range req.WholeCards {
		if len(whole) < w.Cards {
			panic(fmt.Sprintf("pod %s: container %s asks for %d whole cards, %d left", pod.Name, w.Name, w.Cards, len(whole)))
		}
		wa := api.WholeCardAssignment{Name: w.Name}
		for _, card := range whole[:w.Cards] {
			wa.CardUUIDs = append(wa.CardUUIDs, card.UUID)
			wa.CardIndexes = append(wa.CardIndexes, card.Index)
		}
		whole = whole[w.Cards:]
		a.WholeCards = append(a.WholeCards, wa)
	}
	return a
}

// AssignmentFor is Record of pod's gpu-mem containers, in order, on the
// cards of node with the given indexes (CardsOn).
func AssignmentFor(pod *corev1.Pod, node string, phase api.AssignmentPhase, indexes ...int) api.Assignment {
	return Record(pod, node, phase, CardsOn(node, indexes...), nil)
}

// Request is api.Names.RequestFromPod(pod), which must succeed.
func Request(pod *corev1.Pod) api.PodRequest {
	req, err := api.DefaultNames().RequestFromPod(pod)
	if err != nil {
		panic(err)
	}
	return req
}

// MustEncode encodes an assignment, which must be valid.
func MustEncode(a api.Assignment) string {
	s, err := api.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	return s
}

// RecordKeys is an extender key set (signing key and its public half) made
// from name, the same for the same name.
func RecordKeys(name string) api.RecordKeys {
	seed := sha256.Sum256([]byte(name))
	priv := ed25519.NewKeyFromSeed(seed[:])
	return api.RecordKeys{Current: priv.Public().(ed25519.PublicKey), Signer: priv}
}

// RecordKeyFile is RecordKeys(name)'s private key as the extender's Secret
// holds it (PKCS#8 PEM).
func RecordKeyFile(name string) string {
	return string(EncodePrivateKey(RecordKeys(name).Signer))
}

// EncodePrivateKey is priv as api.ParseKey reads it (PKCS#8 PEM).
func EncodePrivateKey(priv ed25519.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(err) // an Ed25519 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// RotatingKeys is RecordKeys(current) with previous as the key being
// rotated out.
func RotatingKeys(current string, previous []byte) api.RecordKeys {
	k := RecordKeys(current)
	k.Previous = previous
	return k
}

// NodeKeys is node's device-plugin keys: extender's public keys, and a node
// key made from name that signs as node's and is the only node key known.
func NodeKeys(extender api.RecordKeys, node, name string) api.RecordKeys {
	k := extender.PublicOnly()
	k.Signer, k.Node = RecordKeys(name).Signer, node
	k.Nodes = api.NodeKeyMap{node: RecordKeys(name).Current}
	return k
}
