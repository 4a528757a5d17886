package usage

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	tUID  = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	tUIDs = "0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0" // systemd's spelling
	tCID  = "3f5e0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
)

// v1 is a cgroup v1 /proc/<pid>/cgroup with path in every hierarchy (the
// real file has one line per mounted controller).
func v1(path string) string {
	return "12:pids:" + path + "\n11:memory:" + path + "\n3:cpu,cpuacct:" + path + "\n1:name=systemd:" + path + "\n0::/\n"
}

func v2(path string) string { return "0::" + path + "\n" }

// cgroupForms is every path shape OwnerOf must understand, by cgroup version,
// driver and runtime.
var cgroupForms = []struct {
	name    string
	content string
	want    Owner
}{
	{"v1 cgroupfs containerd burstable", v1("/kubepods/burstable/pod" + tUID + "/" + tCID), Owner{tUID, tCID}},
	{"v1 cgroupfs containerd guaranteed (no QoS level)", v1("/kubepods/pod" + tUID + "/" + tCID), Owner{tUID, tCID}},
	{"v1 cgroupfs CRI-O besteffort", v1("/kubepods/besteffort/pod" + tUID + "/crio-" + tCID), Owner{tUID, tCID}},
	{"v1 systemd containerd burstable", v1("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + tUIDs + ".slice/cri-containerd-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v1 systemd CRI-O guaranteed", v1("/kubepods.slice/kubepods-pod" + tUIDs + ".slice/crio-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v1 systemd cri-dockerd", v1("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + tUIDs + ".slice/docker-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v2 cgroupfs containerd", v2("/kubepods/besteffort/pod" + tUID + "/" + tCID), Owner{tUID, tCID}},
	{"v2 cgroupfs CRI-O", v2("/kubepods/burstable/pod" + tUID + "/crio-" + tCID), Owner{tUID, tCID}},
	{"v2 systemd containerd", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + tUIDs + ".slice/cri-containerd-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v2 systemd CRI-O with crun's container sub-cgroup", v2("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + tUIDs + ".slice/crio-" + tCID + ".scope/container"), Owner{tUID, tCID}},
	{"v2 systemd under a kubelet cgroup root (kind)", v2("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + tUIDs + ".slice/cri-containerd-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v2 seen from another cgroup namespace", v2("/../../kubepods-besteffort-pod" + tUIDs + ".slice/cri-containerd-" + tCID + ".scope"), Owner{tUID, tCID}},
	{"v2 static pod (hash UID)", v2("/kubepods/burstable/pod0123456789abcdef0123456789abcdef/" + tCID), Owner{"0123456789abcdef0123456789abcdef", tCID}},
	{"CRI-O conmon belongs to the pod, not to a container", v2("/kubepods.slice/kubepods-pod" + tUIDs + ".slice/crio-conmon-" + tCID + ".scope"), Owner{PodUID: tUID}},
	{"a pod-level process (no container segment)", v1("/kubepods/burstable/pod" + tUID), Owner{PodUID: tUID}},
	{"a host service is in no pod", v2("/system.slice/nvidia-persistenced.service"), Owner{}},
	{"a host process in the root cgroup", v1("/"), Owner{}},
	{"a slice that only looks like a pod", v2("/kubepods.slice/kubepods-podnotauid.slice/cri-containerd-" + tCID + ".scope"), Owner{}},
	{"v1 where one hierarchy lacks the container: the line naming it wins", "4:devices:/kubepods/burstable/pod" + tUID + "\n3:memory:/kubepods/burstable/pod" + tUID + "/" + tCID + "\n", Owner{tUID, tCID}},
}

func TestOwnerOfEveryCgroupForm(t *testing.T) {
	root := t.TempDir()
	for i, tt := range cgroupForms {
		dir := filepath.Join(root, strconv.Itoa(1000+i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc := root
	for i, tt := range cgroupForms {
		t.Run(tt.name, func(t *testing.T) {
			got, err := OwnerOf(proc, uint32(1000+i))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("owner (-want +got):\n%s", d)
			}
		})
	}
	t.Run("an exited process is ErrGone", func(t *testing.T) {
		if _, err := OwnerOf(proc, 99999); !errors.Is(err, ErrGone) {
			t.Errorf("err = %v, want ErrGone", err)
		}
	})
}
