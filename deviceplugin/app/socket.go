package app

import (
	"fmt"
	"hash/fnv"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// SocketNames are the plugin's socket files in the kubelet's device-plugin directory, for the
// memory units and the whole cards. Without an instance they are gpushare.sock and
// gpushare-whole.sock; with one, a hash of it (8 hex digits, so that a long pod name never
// makes a path longer than a Unix socket allows) follows, e.g. gpushare-1f3a9c0e.sock.
//
// Two plugins of one node then register on different sockets. The kubelet (1.37 and later)
// keeps one endpoint per socket for a resource and, when one of two disconnects, promotes the
// other without marking the resource's devices unhealthy: a DaemonSet rolling update that starts
// the new pod before stopping the old one (maxSurge: 1, maxUnavailable: 0) hands over with no
// moment at which a pod is refused at admission.
func SocketNames(instance string) (units, whole string) {
	if instance == "" {
		return "gpushare.sock", "gpushare-whole.sock"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(instance))
	id := fmt.Sprintf("%08x", h.Sum32())
	return "gpushare-" + id + ".sock", "gpushare-whole-" + id + ".sock"
}

// otherPodServes reports whether a plugin of another pod serves the kubelet in dir: a gpushare
// socket that is neither this instance's nor its pod sibling's (the chart names the standby
// INSTANCE-standby) accepts a connection. A socket left by a killed plugin refuses it.
func otherPodServes(dir, instance string) bool {
	own := map[string]bool{}
	for _, i := range []string{instance, strings.TrimSuffix(instance, "-standby"), instance + "-standby"} {
		u, w := SocketNames(i)
		own[u], own[w] = true, true
	}
	socks, _ := filepath.Glob(filepath.Join(dir, "gpushare*.sock"))
	for _, s := range socks {
		if own[filepath.Base(s)] {
			continue
		}
		if c, err := net.DialTimeout("unix", s, time.Second); err == nil {
			_ = c.Close()
			return true
		}
	}
	return false
}
