package cache

import (
	"crypto/ed25519"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
)

// nodeKeys are the record keys the nodes' device plugins publish
// (api.Names.AnnotationRecordKey), and the pods whose record a node signed:
// when a node's key changes, those pods' records are read again (SetPod),
// so that a correction signed before the key arrived is counted, and one
// signed with a key the node no longer publishes is not. Its own lock: the
// cache reads a key while verifying a record, before it takes its own.
type nodeKeys struct {
	mu   sync.RWMutex
	keys map[string]ed25519.PublicKey
	pods map[string]map[types.UID]*corev1.Pod
}

// NodeKey is the key node publishes (api.NodeKeys).
func (k *nodeKeys) NodeKey(node string) ed25519.PublicKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys[node]
}

// set records node's published key (nil: none) and returns the pods to read
// again when it changed.
func (k *nodeKeys) set(node string, key ed25519.PublicKey) []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys[node].Equal(key) && (key == nil) == (k.keys[node] == nil) {
		return nil
	}
	if key == nil {
		delete(k.keys, node)
	} else {
		if k.keys == nil {
			k.keys = map[string]ed25519.PublicKey{}
		}
		k.keys[node] = key
	}
	var out []*corev1.Pod
	for _, p := range k.pods[node] {
		out = append(out, p)
	}
	return out
}

// track remembers pod when its record is signed by its node (forgets it
// otherwise).
func (k *nodeKeys) track(pod *corev1.Pod, record string) {
	nodeSigned := strings.Contains(record, `"signature":"ed25519:`+api.SignerNode+`:`)
	k.mu.Lock()
	defer k.mu.Unlock()
	node := pod.Spec.NodeName
	if !nodeSigned || node == "" {
		k.forgetLocked(pod.UID)
		return
	}
	if k.pods == nil {
		k.pods = map[string]map[types.UID]*corev1.Pod{}
	}
	if k.pods[node] == nil {
		k.pods[node] = map[types.UID]*corev1.Pod{}
	}
	k.pods[node][pod.UID] = pod
}

// forget drops a deleted pod.
func (k *nodeKeys) forget(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(uid)
}

func (k *nodeKeys) forgetLocked(uid types.UID) {
	for node, pods := range k.pods {
		if _, ok := pods[uid]; ok {
			delete(pods, uid)
			if len(pods) == 0 {
				delete(k.pods, node)
			}
		}
	}
}

// setNodeKey reads node's published record key and, when it changed, reads
// the records its device plugin signed again. A key that does not parse
// counts as none.
func (c *Cache) setNodeKey(node *corev1.Node) {
	var key ed25519.PublicKey
	if s, ok := node.Annotations[c.names.AnnotationRecordKey()]; ok {
		key, _ = api.ParsePublicKey(s)
	}
	for _, p := range c.nodeKeys.set(node.Name, key) {
		c.SetPod(p)
	}
}
