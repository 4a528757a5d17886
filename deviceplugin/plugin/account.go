package plugin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/deviceplugin/allocate"
)

// podResourcesTimeout bounds one read of the kubelet's PodResources API.
const podResourcesTimeout = 5 * time.Second

// account is one read of the kubelet's own account (PodResources): which
// container of the pods in the cache holds which units. gen is the ledger's
// generation when the read started: guesses made later are not in it.
type account struct {
	holdings []holding
	gen      uint64
}

// readAccount reads the kubelet's account. Called WITHOUT allocMu (a gRPC
// call). false: no PodResources configured, or the read failed; the plugin
// then decides on its own memory.
//
// The kubelet admits pods one at a time and records a container's units as
// soon as its Allocate returns, so a read that starts when the kubelet asks
// about the next container shows every container it has allocated so far:
// those are not pending, whatever the plugin guessed (a guess the account
// contradicts is dropped and its pod is reopened), and the only unknown left
// is which of the still-pending containers the call is for.
func (p *Plugin) readAccount(ctx context.Context) (account, bool) {
	if p.podres == nil {
		return account{}, false
	}
	acct := account{gen: p.ledger.generation()}
	pods, err := p.cluster.Pods()
	if err != nil {
		return account{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	hs, err := p.podres.List(ctx)
	if err != nil {
		p.log.V(2).Info("PodResources unavailable; deciding on the plugin's own memory", "err", err)
		return account{}, false
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	acct.holdings = make([]holding, 0, len(hs))
	for _, h := range hs {
		pod, ok := byName[h.Namespace+"/"+h.Pod]
		if !ok {
			continue // a pod the cache does not know (yet): nothing to record
		}
		card, err := allocate.CardOf(h.IDs)
		if err != nil {
			p.log.Error(err, "Kubelet reports units of several cards for one container", "pod", klog.KObj(pod), "container", h.Container)
			continue
		}
		acct.holdings = append(acct.holdings, holding{Namespace: h.Namespace, Pod: h.Pod, UID: pod.UID, Container: h.Container, Card: card, IDs: h.IDs})
	}
	return acct, true
}

// merge puts an account into the ledger (callers hold allocMu) and returns
// the pods it reopened. It merges, not replaces: the kubelet records a
// container's units only after the Allocate it answers, so the latest
// decision may not be in the account yet; and a guess made after the read
// started is kept whatever the read says (ledger.confirm).
func (p *Plugin) merge(acct account) []types.UID {
	var reopened []types.UID
	for _, h := range acct.holdings {
		reopened = append(reopened, p.ledger.confirm(h, acct.gen)...)
	}
	return reopened
}
