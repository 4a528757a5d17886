package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/burstbench"
)

// serveFloor serves the do-nothing device plugin on each of the playground's
// nodes (state/nodes/NODE/device-plugins), as many devices as the node has
// gpu-mem units, and waits until every node shows them allocatable. A cluster
// without such directories gets no floor (nil, nil).
func serveFloor(ctx context.Context, client kubernetes.Interface, state string, res corev1.ResourceName) (func(), error) {
	socks, _ := filepath.Glob(filepath.Join(state, "nodes", "*", "device-plugins", "kubelet.sock"))
	if len(socks) == 0 {
		fmt.Fprintf(os.Stderr, "burstbench: no device floor: no node's kubelet.sock under %s/nodes (not the playground?)\n", state)
		return nil, nil
	}
	var nodes []burstbench.FloorNode
	for _, s := range socks {
		dir := filepath.Dir(s)
		node := filepath.Base(filepath.Dir(dir))
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		units := n.Status.Allocatable[api.DefaultNames().ResourceName()]
		nodes = append(nodes, burstbench.FloorNode{Name: node, Dir: dir, Devices: int(units.Value())})
	}
	return burstbench.StartFloor(ctx, client, res, nodes, 30*time.Second)
}
