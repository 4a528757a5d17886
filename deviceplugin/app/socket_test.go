package app

import (
	"net"
	"os"
	"path/filepath"
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

// Only a listening socket of another pod's plugin is a previous instance: this plugin's own, its
// pod sibling's (the standby) and a socket a killed plugin left behind are not.
func TestOtherPodServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "gp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	listen := func(instance string, whole bool) net.Listener {
		u, w := SocketNames(instance)
		if whole {
			u = w
		}
		l, err := net.Listen("unix", filepath.Join(dir, u))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const self, sibling = "gpushare-device-plugin-new", "gpushare-device-plugin-new-standby"
	defer func() { _ = listen(self, false).Close() }()
	defer func() { _ = listen(sibling, true).Close() }()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-gpu.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, instance := range []string{self, sibling} {
		if otherPodServes(dir, instance) {
			t.Errorf("%s: another pod serves, with only this pod's plugins listening", instance)
		}
	}
	killed := listen("gpushare-device-plugin-old", false)
	if !otherPodServes(dir, self) {
		t.Error("no other pod serves, with the old pod's plugin listening beside this one")
	}
	if l, ok := killed.(*net.UnixListener); ok {
		l.SetUnlinkOnClose(false)
	}
	_ = killed.Close()
	if _, err := os.Stat(filepath.Join(dir, func() string { u, _ := SocketNames("gpushare-device-plugin-old"); return u }())); err != nil {
		t.Fatalf("the killed plugin's socket should be left behind: %v", err)
	}
	if otherPodServes(dir, self) {
		t.Error("another pod serves, with only a killed plugin's socket left behind")
	}
	if otherPodServes(filepath.Join(dir, "missing"), self) {
		t.Error("another pod serves in a directory that does not exist")
	}
}
