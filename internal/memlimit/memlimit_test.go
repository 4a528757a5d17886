package memlimit

import (
	"errors"
	"io/fs"
	"testing"
)

func files(m map[string]string) ReadFile {
	return func(name string) ([]byte, error) {
		if v, ok := m[name]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		err   bool
	}{
		{"v2, the process's own cgroup", map[string]string{
			"/proc/self/cgroup": "0::/kubepods.slice/pod1/cri-containerd-abc.scope\n",
			"/sys/fs/cgroup/kubepods.slice/pod1/cri-containerd-abc.scope/memory.max": "1073741824\n",
			"/sys/fs/cgroup/memory.max": "max\n",
		}, 1 << 30, false},
		{"v2, a cgroup namespace: the root is the container's", map[string]string{
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "536870912\n",
		}, 512 << 20, false},
		{"v2, path not visible, the root's file", map[string]string{
			"/proc/self/cgroup":         "0::/../../kubepods/x\n",
			"/sys/fs/cgroup/memory.max": "268435456",
		}, 256 << 20, false},
		{"v2 without a limit", map[string]string{
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "max\n",
		}, 0, false},
		{"v1", map[string]string{
			"/proc/self/cgroup": "12:cpu,cpuacct:/kubepods/pod1/abc\n7:memory:/kubepods/pod1/abc\n",
			"/sys/fs/cgroup/memory/kubepods/pod1/abc/memory.limit_in_bytes": "2147483648\n",
		}, 2 << 30, false},
		{"v1 without a limit", map[string]string{
			"/proc/self/cgroup":                           "7:memory:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, false},
		{"no cgroup filesystem", map[string]string{"/proc/self/cgroup": "0::/\n"}, 0, false},
		{"no /proc", map[string]string{}, 0, false},
		{"garbage", map[string]string{
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "lots\n",
		}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CgroupLimit(files(tc.files))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("CgroupLimit = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestCgroupLimitReportsUnreadableFiles(t *testing.T) {
	denied := errors.New("permission denied")
	_, err := CgroupLimit(func(name string) ([]byte, error) {
		if name == "/proc/self/cgroup" {
			return []byte("0::/\n"), nil
		}
		return nil, denied
	})
	if !errors.Is(err, denied) {
		t.Errorf("err = %v, want the read error", err)
	}
}

func TestSoftLimit(t *testing.T) {
	if got := SoftLimit(1<<30, 0.9); got != 966367641 {
		t.Errorf("SoftLimit(1 GiB, 0.9) = %d", got)
	}
	if SoftLimit(0, 0.9) != 0 || SoftLimit(1<<30, 0) != 0 {
		t.Error("no limit, or fraction 0, must set none")
	}
}
