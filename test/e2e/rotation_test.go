package e2e

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
)

// keyVolume is a directory laid out as the kubelet lays out a Secret volume
// (AtomicWriter): each key a symlink into "..data", itself a symlink to a
// timestamped directory that an update replaces in one rename.
type keyVolume struct {
	t   *testing.T
	dir string
	n   int
}

func newKeyVolume(t *testing.T, files map[string]string) *keyVolume {
	v := &keyVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for _, name := range []string{api.RecordKeyCurrent, api.RecordKeyPrevious} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *keyVolume) update(files map[string]string) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_23_12_00_00.%d", v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), []byte(content), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

// The record key rotation of docs/security.md, end to end, with a device
// plugin and an extender that share one key directory and are never
// restarted: (1) the new key is added as "previous", (2) it becomes
// "current" with the old one as "previous", (3) the old one is dropped. At
// every step a pod bound by the extender runs (its record signed with the
// step's current key, accepted by the plugin), a record signed with the old
// key is signed again by the plugin once the new key is current, so that
// dropping the old key leaves no record behind; and a directory changed to an
// invalid key leaves the last good key in force.
func TestRecordKeyRotationWithoutRestart(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	byOld, byNew := freshKeys(t), freshKeys(t)
	oldKey, newKey := string(podtest.EncodePrivateKey(byOld.Signer)), string(podtest.EncodePrivateKey(byNew.Signer))
	// vol is the extender's Secret (private keys); pubVol the device plugin's
	// view of the ConfigMap the extender publishes the public halves in,
	// copied by publish as the kubelet would sync it.
	vol := newKeyVolume(t, map[string]string{api.RecordKeyCurrent: oldKey})
	keysNS := testNamespace(ctx, t, c, "rotation-keys")
	if _, err := c.Client.CoreV1().ConfigMaps(keysNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "record-public-key"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pubVol := newKeyVolume(t, map[string]string{api.RecordKeyCurrent: api.NodeKeyAnnotation(byOld.Current)})
	publish := func(want api.RecordKeys, step string) {
		t.Helper()
		var cm *corev1.ConfigMap
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := c.Client.CoreV1().ConfigMaps(keysNS).Get(ctx, "record-public-key", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			cm = got
			prev := ""
			if want.Previous != nil {
				prev = api.NodeKeyAnnotation(want.Previous)
			}
			return got.Data[api.RecordKeyCurrent] == api.NodeKeyAnnotation(want.Current) && got.Data[api.RecordKeyPrevious] == prev, nil
		}); err != nil {
			t.Fatalf("%s: the extender did not publish the public keys: %+v", step, cm)
		}
		pubVol.update(cm.Data)
	}

	const name = "rotation-node"
	node, _ := gpuNode(ctx, t, c, name, "1x24GiB:NVIDIA-L4", withPluginArgs("--record-key-dir", pubVol.dir, "--record-key-interval=1s", "--reconcile-interval=3s"))
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ext, err := cluster.StartProcess("gpushare-scheduler-rotation", filepath.Join(c.StateDir(), "logs", "gpushare-scheduler-rotation.log"), extenderBin,
		"--kubeconfig", c.Kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--policy", "binpack",
		"--record-key-dir", vol.dir, "--record-key-interval=1s", "--record-public-key-configmap", keysNS+"/record-public-key")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Stop() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := ext.WaitHTTP(ctx, base+"/readyz", time.Minute); err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(ctx, t, c, "rotation")
	pluginLog := filepath.Join(node.Opts.StateDir, "plugin.log")

	// bind creates a 4-unit pod no scheduler picks up and binds it through
	// this extender (its /bind verb signs the record), then waits until it
	// runs.
	bind := func(pod string) *corev1.Pod {
		t.Helper()
		p := gpuPod(ns, pod, 4)
		p.Spec.SchedulerName = "nobody"
		created, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var res extenderv1.ExtenderBindingResult
		postJSON(ctx, t, base+"/bind", extenderv1.ExtenderBindingArgs{PodName: pod, PodNamespace: ns, PodUID: created.UID, Node: name}, &res)
		if res.Error != "" {
			t.Fatalf("bind %s: %s", pod, res.Error)
		}
		return waitRunning(ctx, t, c, ns, pod, node)
	}
	// signedBy waits until the pod's record verifies with the extender's
	// public keys alone and the key the node publishes (the plugin's
	// corrections are signed with its node key).
	signedBy := func(pod string, keys api.RecordKeys, what string) {
		t.Helper()
		var last error
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			a, err := api.DefaultNames().AssignmentFromPod(p)
			if err == nil {
				err = verifier(ctx, t, c, keys.PublicOnly(), name).Verify(a)
			}
			last = err
			return err == nil, nil
		}); err != nil {
			t.Fatalf("pod %s: its record is not signed by the %s key: %v\nplugin log: %s", pod, what, last, pluginLog)
		}
	}
	// reloaded waits until both programs have read the directory's n-th
	// content (the extender's reload counter, the plugin's log).
	reloaded := func(n int, step string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, _ := os.ReadFile(pluginLog)
			return metric(ctx, base, "gpushare_record_key_reloads_total") == float64(n) && strings.Count(string(b), "Record keys reloaded") >= n, nil
		}); err != nil {
			t.Fatalf("%s: the programs did not read the new keys: %v", step, err)
		}
	}

	bind("p0")
	signedBy("p0", byOld, "old")

	vol.update(map[string]string{api.RecordKeyCurrent: oldKey, api.RecordKeyPrevious: newKey})
	publish(api.RecordKeys{Current: byOld.Current, Previous: byNew.Current}, "step 1")
	reloaded(1, "step 1 (new key added as previous)")
	bind("p1")
	signedBy("p1", byOld, "old")

	vol.update(map[string]string{api.RecordKeyCurrent: newKey, api.RecordKeyPrevious: oldKey})
	publish(api.RecordKeys{Current: byNew.Current, Previous: byOld.Current}, "step 2")
	reloaded(2, "step 2 (new key current, old previous)")
	bind("p2")
	signedBy("p2", byNew, "new")
	// The old key's records are the plugin's now (signed with its node key
	// at Allocate), so they verify without the old key.
	signedBy("p0", byNew, "new")
	signedBy("p1", byNew, "new")

	vol.update(map[string]string{api.RecordKeyCurrent: newKey})
	publish(api.RecordKeys{Current: byNew.Current}, "step 3")
	reloaded(3, "step 3 (old key dropped)")
	bind("p3")
	signedBy("p3", byNew, "new")

	// A broken Secret: the last good key stays in force in both programs.
	vol.update(map[string]string{api.RecordKeyCurrent: "short"})
	pubVol.update(map[string]string{api.RecordKeyCurrent: "short"})
	if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, _ := os.ReadFile(pluginLog)
		return metric(ctx, base, "gpushare_record_key_in_force") == 0 && strings.Contains(string(b), "not a valid key set"), nil
	}); err != nil {
		t.Fatalf("an invalid key directory was not reported: %v", err)
	}
	bind("p4")
	signedBy("p4", byNew, "new (last good)")
	for _, p := range []string{"p0", "p1", "p2", "p3"} {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is not running after the rotation (%v)", p, err)
		}
	}
}

// metric reads one unlabelled sample from a Prometheus text endpoint (-1:
// not there).
func metric(ctx context.Context, base, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// freshKeys is a new extender key set.
func freshKeys(t *testing.T) api.RecordKeys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return api.RecordKeys{Current: pub, Signer: priv}
}
