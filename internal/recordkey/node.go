package recordkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"

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

// NewNodeRing generates node's key (kept in memory only: it is published
// on the Node at each start, see Public) over ring.
func NewNodeRing(ring api.RecordKeyring, node string) (*NodeRing, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the node record key: %w", err)
	}
	return &NodeRing{ring: ring, node: node, key: key, pub: pub}, nil
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
