package app

import (
	"strings"
	"testing"
)

func TestSocketNames(t *testing.T) {
	u, w := SocketNames("")
	if u != "gpushare.sock" || w != "gpushare-whole.sock" {
		t.Errorf("no instance: %s %s", u, w)
	}
	a, aw := SocketNames("gpushare-device-plugin-x7k2p")
	b, _ := SocketNames("gpushare-device-plugin-q9z4m")
	if a == b {
		t.Errorf("two pods of one node share the socket %s: the new plugin would replace the old one's", a)
	}
	if a2, _ := SocketNames("gpushare-device-plugin-x7k2p"); a2 != a {
		t.Errorf("one instance, two names: %s %s", a, a2)
	}
	long := strings.Repeat("x", 253)
	l, lw := SocketNames(long)
	// /var/lib/kubelet/device-plugins/ + name must fit sun_path (108 bytes with the NUL).
	if n := len("/var/lib/kubelet/device-plugins/") + len(lw); n >= 108 || len(l) > len(lw) {
		t.Errorf("a 253-character instance gives %s (%d bytes with the directory)", lw, n)
	}
	if !strings.HasPrefix(a, "gpushare-") || !strings.HasSuffix(aw, ".sock") || !strings.HasPrefix(aw, "gpushare-whole-") {
		t.Errorf("names %s %s", a, aw)
	}
}
