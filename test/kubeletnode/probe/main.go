// Command probe is the container lane's test image: it prints, as one JSON
// line prefixed by "gpushare-probe ", what the container sees — its
// environment, the entries of /var/run/nvidia-container-devices and the
// /dev/nvidia* device nodes (type, major, minor) — at start and then every
// 2 seconds until it is stopped, so a test can read what a running container
// sees now (e.g. after a kubelet restart) from its log.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix starts every report line.
const Prefix = "gpushare-probe "

// Device is a device node the container sees.
type Device struct {
	Path  string `json:"path"`
	Char  bool   `json:"char"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Report is what the container sees.
type Report struct {
	Seq            int               `json:"seq"`
	Env            map[string]string `json:"env"`
	DeviceRequests []string          `json:"deviceRequests"`
	Devices        []Device          `json:"devices"`
}

func see(seq int) Report {
	r := Report{Seq: seq, Env: map[string]string{}, DeviceRequests: []string{}, Devices: []Device{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	if entries, err := os.ReadDir("/var/run/nvidia-container-devices"); err == nil {
		for _, e := range entries {
			r.DeviceRequests = append(r.DeviceRequests, e.Name())
		}
	}
	paths, _ := filepath.Glob("/dev/nvidia*")
	sort.Strings(paths)
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		r.Devices = append(r.Devices, Device{Path: p, Char: st.Mode&unix.S_IFMT == unix.S_IFCHR,
			Major: unix.Major(uint64(st.Rdev)), Minor: unix.Minor(uint64(st.Rdev))})
	}
	return r
}

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		b, _ := json.Marshal(see(seq))
		fmt.Println(Prefix + string(b))
		select {
		case <-sigs:
			return
		case <-tick.C:
		}
	}
}
