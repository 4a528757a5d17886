package usage

import (
	"bytes"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Owner is what a process's cgroup says about it: the pod (by UID) and the
// container (by runtime container ID, without the "containerd://" scheme)
// the kubelet started it in. A process outside every pod has a zero Owner.
type Owner struct {
	PodUID      types.UID
	ContainerID string
}

// InPod reports whether the process runs in a pod.
func (o Owner) InPod() bool { return o.PodUID != "" }

// ParseCgroup reads the contents of /proc/<pid>/cgroup. Every line is
// "hierarchy:controllers:path" (cgroup v1: one line per hierarchy; v2: the
// single line "0::path"); the first path naming a pod wins, one that also
// names a container preferred. The path shapes the kubelet makes, by cgroup
// driver (pod UID 0b1c…-…, container ID 3f5e…, 64 hex digits):
//
//	cgroupfs  /kubepods/burstable/pod0b1c…-…/3f5e…                  containerd, docker
//	          /kubepods/pod0b1c…-…/crio-3f5e…                        CRI-O (Guaranteed pods: no QoS level)
//	systemd   /kubepods.slice/kubepods-burstable.slice/
//	            kubepods-burstable-pod0b1c…_….slice/cri-containerd-3f5e….scope   containerd
//	            …/crio-3f5e….scope (and …/crio-3f5e….scope/container)           CRI-O
//	            …/docker-3f5e….scope                                            cri-dockerd
//
// The pod segment is found anywhere in the path, so a kubelet cgroup root
// (kind's /kubelet.slice/kubelet-kubepods.slice/…) and the "/../.." prefix a
// reader in another cgroup namespace sees are both understood. CRI-O's
// conmon (crio-conmon-….scope) belongs to the pod but to no container.
func ParseCgroup(content []byte) Owner {
	var found Owner
	for len(content) > 0 {
		var line []byte
		line, content, _ = bytes.Cut(content, []byte{'\n'})
		_, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		_, path, ok := bytes.Cut(rest, []byte{':'})
		if !ok {
			continue
		}
		o := parsePath(string(path))
		if o.ContainerID != "" {
			return o
		}
		if found.PodUID == "" {
			found = o
		}
	}
	return found
}

func parsePath(path string) Owner {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		uid, ok := podSegment(s)
		if !ok {
			continue
		}
		o := Owner{PodUID: types.UID(uid)}
		if i+1 < len(segs) {
			o.ContainerID = containerSegment(segs[i+1])
		}
		return o
	}
	return Owner{}
}

// podSegment recognises "pod<uid>" (cgroupfs) and
// "…-pod<uid with '_' for '-'>.slice" (systemd).
func podSegment(s string) (string, bool) {
	var uid string
	switch {
	case strings.HasSuffix(s, ".slice"):
		i := strings.LastIndex(s, "-pod")
		if i < 0 {
			return "", false
		}
		uid = strings.ReplaceAll(s[i+len("-pod"):len(s)-len(".slice")], "_", "-")
	case strings.HasPrefix(s, "pod"):
		uid = s[len("pod"):]
	default:
		return "", false
	}
	return uid, isUID(uid)
}

// isUID accepts API-server UIDs (8-4-4-4-12 hex) and static pods' UIDs
// (a 32-hex-digit hash of the manifest).
func isUID(s string) bool {
	if len(s) != 36 && len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' && len(s) == 36 && (i == 8 || i == 13 || i == 18 || i == 23) {
			continue
		}
		if !isHex(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// containerSegment returns the container ID in "3f5e…", "crio-3f5e…",
// "cri-containerd-3f5e….scope", "crio-3f5e….scope" or "docker-3f5e….scope";
// "" for anything else (conmon, a pod-level cgroup).
func containerSegment(s string) string {
	s = strings.TrimSuffix(s, ".scope")
	if strings.HasPrefix(s, "crio-conmon-") {
		return ""
	}
	for _, p := range []string{"cri-containerd-", "crio-", "docker-", "containerd-"} {
		if strings.HasPrefix(s, p) {
			s = s[len(p):]
			break
		}
	}
	if len(s) < 12 || len(s) > 128 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return ""
		}
	}
	return s
}
