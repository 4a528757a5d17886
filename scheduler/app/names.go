package app

import (
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// warnNameMismatches logs, once the cache has synced, every way the
// cluster's nodes disagree with the extender's names (api.NodeMismatches):
// nodes whose device plugin runs with another --domain or other resource
// names are invisible to the extender, and their pods would pend.
func warnNameMismatches(logger klog.Logger, names api.Names, nodes corelisters.NodeLister) {
	list, err := nodes.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing nodes to check their names")
		return
	}
	for _, msg := range names.NodeMismatches(list) {
		logger.Error(nil, "Names do not match the cluster's: "+msg, "names", names.String())
	}
}
