package recordkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpushare/gpushare/api"
)

// NodeRing is a device plugin's keyring: the extender's public keys in
// force (from ring), plus the plugin's own node key, which signs the
// records it corrects (api.RecordKeys.Node) and is the only node key it
// trusts: a plugin reads records of its own node's pods only.
type NodeRing struct {
	ring api.RecordKeyring
	node string
	key  ed25519.PrivateKey
	pub  ed25519.PublicKey
}

// NewNodeRing gives node's key over ring: read from keyFile when it exists,
// else generated and, with keyFile set, written there (0600, created
// atomically: two plugin processes of one node during a rolling update
// share one key). With keyFile empty the key lives in memory only and a
// restarted plugin gets a new one: the records its predecessor signed stop
// verifying until they are rewritten from the kubelet's account. The key
// is published on the Node at each start (Public).
func NewNodeRing(ring api.RecordKeyring, node, keyFile string) (*NodeRing, error) {
	key, err := nodeKey(keyFile)
	if err != nil {
		return nil, err
	}
	return &NodeRing{ring: ring, node: node, key: key, pub: key.Public().(ed25519.PublicKey)}, nil
}

// nodeKey reads or makes the node key (see NewNodeRing). The file holds the
// key's 32-byte seed in base64.
func nodeKey(keyFile string) (ed25519.PrivateKey, error) {
	if keyFile == "" {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generating the node record key: %w", err)
		}
		return key, nil
	}
	for range 2 {
		b, err := os.ReadFile(keyFile)
		if err == nil {
			seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
			if err != nil || len(seed) != ed25519.SeedSize {
				return nil, fmt.Errorf("node record key %s: not a base64 Ed25519 seed of %d bytes; delete it and the plugin makes a new one", keyFile, ed25519.SeedSize)
			}
			return ed25519.NewKeyFromSeed(seed), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node record key: %w", err)
		}
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, fmt.Errorf("generating the node record key: %w", err)
		}
		if err := writeNew(keyFile, []byte(base64.StdEncoding.EncodeToString(seed)+"\n")); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue // another process of this node made it first: read theirs
			}
			return nil, fmt.Errorf("node record key: %w", err)
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	return nil, fmt.Errorf("node record key %s: appeared and vanished while read", keyFile)
}

// writeNew writes a file that must not exist yet, whole or not at all: a
// temporary file linked into place (link fails if the name exists).
func writeNew(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".node-key-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), name)
}

// Public is the node key's public half, to publish on the Node
// (api.Names.AnnotationRecordKey).
func (r *NodeRing) Public() ed25519.PublicKey { return r.pub }

// Keys returns the extender's keys in force with the node key
// (api.RecordKeyring). Without extender keys, records are not signed.
func (r *NodeRing) Keys() api.RecordKeys {
	k := api.KeysOf(r.ring).PublicOnly()
	if !k.Enabled() {
		return api.RecordKeys{}
	}
	k.Signer, k.Node = r.key, r.node
	k.Nodes = api.NodeKeyMap{r.node: r.pub}
	return k
}
