package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// checkPluginCrashesFailNoPod is the install lane's crash test on the real kubelet: the chart's
// device plugin pod runs the plugin and its standby; each container in turn is SIGKILLed (its
// process, seen from the host) and GPU pods arrive every 0.5 s (at most 10) from the kill until
// the kubelet has restarted the container and it is ready again. None of those pods fails at
// admission: the kubelet keeps the node's GPU devices healthy through the other container's
// endpoint. ns must hold no pod but keep (whose card must stay).
//
// The pods arrive once the kubelet has logged both resources' disconnection of the killed
// plugin (kubeletLog): a pod it admits in the milliseconds before (it reads each endpoint's end
// of stream in its own goroutine, seen 24 ms apart under load) is sent to the dead endpoint and
// fails, which no plugin can prevent (docs/operations.md).
func checkPluginCrashesFailNoPod(ctx context.Context, t *testing.T, c *cluster.Cluster, kubeletLog, ns string) {
	if pod, _ := pluginContainer(ctx, t, c, "device-plugin"); len(pod.Spec.Containers) < 2 {
		t.Skipf("the chart runs no standby plugin on this Kubernetes version (%d container)", len(pod.Spec.Containers))
	}
	for round, container := range []string{"device-plugin", "device-plugin-standby"} {
		pod, restarts := pluginContainer(ctx, t, c, container)
		pid := pluginProcess(t, pod.Name, container)
		// The kill first: a pod whose Allocate the kill itself cut fails (the kubelet does not retry
		// an admission; docs/operations.md), so the pods arrive from the kill on.
		logged := fileSize(kubeletLog)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s (pid %d): %v", container, pid, err)
		}
		killed := time.Now()
		waitDisconnected(t, kubeletLog, logged)
		stop, created := make(chan struct{}), make(chan []string, 1)
		go func() {
			var names []string
			defer func() { created <- names }()
			// At most 10 a round: the lane's kubelet runs 30 pods.
			for i := 0; i < 10; i++ {
				p := installPod(ns, fmt.Sprintf("crash%d-%d", round, i), 1)
				if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Errorf("create %s: %v", p.Name, err)
				} else {
					names = append(names, p.Name)
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		_, err := cluster.WaitPod(ctx, c.Client, installNamespace, pod.Name, 2*time.Minute, container+" restarted and ready", func(p *corev1.Pod) bool {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == container {
					return cs.RestartCount > restarts && cs.Ready
				}
			}
			return false
		})
		close(stop)
		names := <-created
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s SIGKILLed: restarted and ready after %v; %d GPU pods created meanwhile", container, time.Since(killed).Round(100*time.Millisecond), len(names))
		for _, name := range names {
			p, err := cluster.WaitPod(ctx, c.Client, ns, name, 2*time.Minute, "Running", func(p *corev1.Pod) bool {
				return p.Status.Phase != corev1.PodPending
			})
			switch {
			case err != nil:
				t.Errorf("%v", err)
			case p.Status.Phase != corev1.PodRunning:
				t.Errorf("pod %s created while %s was down: %s %s: %s", name, container, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
		}
		for _, name := range names {
			_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		for _, name := range names {
			if err := cluster.WaitPodGone(ctx, c.Client, ns, name, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// pluginContainer finds the chart's device plugin pod and the restart count of its container.
func pluginContainer(ctx context.Context, t *testing.T, c *cluster.Cluster, container string) (*corev1.Pod, int32) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=device-plugin"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.Ready {
				return p, cs.RestartCount
			}
		}
	}
	t.Fatalf("no ready container %s in the device plugin's pods (%d pods)", container, len(pods.Items))
	return nil, 0
}

// pluginProcess finds, from the host, the process of the plugin container: the
// gpushare-device-plugin whose GPUSHARE_INSTANCE is the pod's name (the plugin) or the pod's name
// and -standby (the standby), as the chart sets them.
func pluginProcess(t *testing.T, pod, container string) int {
	t.Helper()
	want := "GPUSHARE_INSTANCE=" + pod
	if container == "device-plugin-standby" {
		want += "-standby"
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0])) != "gpushare-device-plugin" {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if string(kv) == want {
				return pid
			}
		}
	}
	t.Fatalf("no gpushare-device-plugin process with %s on this host", want)
	return 0
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitDisconnected waits until the kubelet log, from offset on, shows both of the plugin's
// resources disconnected.
func waitDisconnected(t *testing.T, kubeletLog string, offset int64) {
	t.Helper()
	names := api.DefaultNames()
	want := [][]byte{
		[]byte(fmt.Sprintf(`"Device plugin disconnected" resource=%q`, names.ResourceName())),
		[]byte(fmt.Sprintf(`"Device plugin disconnected" resource=%q`, names.WholeResourceName())),
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(kubeletLog)
		if int64(len(b)) > offset {
			b = b[offset:]
		} else {
			b = nil
		}
		if bytes.Contains(b, want[0]) && bytes.Contains(b, want[1]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet (%s) did not log both resources' disconnection within a minute of the kill", kubeletLog)
		}
	}
}
