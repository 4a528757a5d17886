package app

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/conflict"
)

// otherPluginPoll is how often a plugin that found another GPU device plugin
// on its node looks again.
const otherPluginPoll = 30 * time.Second

// waitForNoOtherPlugin returns once the node advertises no other GPU device
// plugin's resources (conflict.Check), or when ctx ends (false). Until then
// the plugin does not register: it says why in its log and, once per
// different finding, in a Warning Event on the Node, and looks again every
// poll. reader reads the Node; client records the Event.
func waitForNoOtherPlugin(ctx context.Context, reader, client kubernetes.Interface, nodeName string, names api.Names, poll time.Duration, log klog.Logger) (bool, error) {
	said := ""
	for {
		node, err := reader.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("read Node %q: %w", nodeName, err)
		}
		found := conflict.Check(node, names)
		if len(found) == 0 {
			if said != "" {
				log.Info("The other GPU device plugin is gone from the node; registering")
			}
			return true, nil
		}
		if msg := conflict.Message(nodeName, found); msg != said {
			said = msg
			log.Error(nil, msg)
			if err := nodeEvent(ctx, client, node, corev1.EventTypeWarning, conflict.Reason, msg); err != nil {
				log.Error(err, "Recording the Event on the Node failed")
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}

// nodeEvent records an Event on agent, in the default namespace (where the
// kubelet records a Node's events).
func nodeEvent(ctx context.Context, client kubernetes.Interface, node *corev1.Node, typ, reason, msg string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		Reason:         reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "gpushare-device-plugin", Host: node.Name},
	}
	_, err := client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// logNameMismatches logs every way the node and the pods bound to it
// disagree with the plugin's names (api.NodeMismatches, PodMismatches):
// records under another domain are invisible to this plugin.
func logNameMismatches(ctx context.Context, cl *cluster.Cluster, names api.Names, log klog.Logger) {
	var msgs []string
	if node, err := cl.Reader().CoreV1().Nodes().Get(ctx, cl.Node(), metav1.GetOptions{}); err == nil {
		msgs = append(msgs, names.NodeMismatches([]*corev1.Node{node})...)
	}
	if pods, err := cl.Pods(); err == nil {
		msgs = append(msgs, names.PodMismatches(pods)...)
	}
	for _, m := range msgs {
		log.Error(nil, "Names do not match the cluster's: "+m, "names", names.String())
	}
}
