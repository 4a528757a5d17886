// Command probe is the container lane's test image: it prints, as one JSON
// line prefixed by "gpushare-probe ", what the container sees — its
// environment, the entries of /var/run/nvidia-container-devices and the
// /dev/nvidia* device nodes (type, major, minor) — at start and then every
// 2 seconds until it is stopped, so a test can read what a running container
// sees now (e.g. after a kubelet restart) from its log.
//
// It also reports what the container may do with what it sees: whether each
// device node opens (EPERM: the device cgroup refuses it; ENXIO: allowed, no
// driver behind it), its user and effective capabilities, whether each
// directory in PROBE_WRITE_DIRS takes a new file, and whether each unix
// socket in PROBE_CONNECT accepts a connection (both colon-separated).
package main

import (
	"encoding/json"
	"errors"
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
	// Opens maps each device path to "ok" or the errno of opening it.
	Opens map[string]string `json:"opens"`
	// UID is the process's user; CapEff its effective capability mask (hex,
	// as /proc/self/status shows it).
	UID    int    `json:"uid"`
	CapEff string `json:"capEff"`
	// Writable maps each PROBE_WRITE_DIRS entry to "ok" or the errno of
	// creating a file there; Connects each PROBE_CONNECT socket likewise.
	Writable map[string]string `json:"writable"`
	Connects map[string]string `json:"connects"`
}

func see(seq int) Report {
	r := Report{Seq: seq, Env: map[string]string{}, DeviceRequests: []string{}, Devices: []Device{},
		Opens: map[string]string{}, Writable: map[string]string{}, Connects: map[string]string{}}
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
		r.Opens[p] = outcome(func() error {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		})
	}
	r.UID = os.Getuid()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				r.CapEff = strings.TrimSpace(v)
			}
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PROBE_WRITE_DIRS")) {
		r.Writable[dir] = outcome(func() error {
			f, err := os.CreateTemp(dir, ".probe-*")
			if err != nil {
				return err
			}
			f.Close()
			return os.Remove(f.Name())
		})
	}
	for _, sock := range filepath.SplitList(os.Getenv("PROBE_CONNECT")) {
		r.Connects[sock] = outcome(func() error {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Connect(fd, &unix.SockaddrUnix{Name: sock})
		})
		if r.Connects[sock] != "ok" { // what the directory held instead, to tell why
			var names []string
			if entries, err := os.ReadDir(filepath.Dir(sock)); err == nil {
				for _, e := range entries {
					names = append(names, e.Name())
				}
			}
			r.Connects[sock] += " (directory: " + strings.Join(names, ",") + ")"
		}
	}
	return r
}

// outcome is "ok", or the errno's name (e.g. "EPERM") of what fn returned.
func outcome(fn func() error) string {
	err := fn()
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
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
