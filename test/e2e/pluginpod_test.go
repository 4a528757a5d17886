package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/kubeletnode"
)

// pluginPodSocket and pluginPodResources are the kubelet sockets the device
// plugin connects to (registration, PodResources), inside its mounts.
const (
	pluginPodSocketDir = "/var/lib/kubelet/device-plugins"
	pluginPodSocket    = pluginPodSocketDir + "/kubelet.sock"
	pluginPodResources = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// pluginPodNodeCredential is where the chart mounts the node's certificate directory, read-only.
	pluginPodNodeCredential = "/var/lib/kubelet/pki"
)

// chartPluginPod is the device plugin DaemonSet's pod as the chart renders it
// with its defaults (set adds --set flags), made runnable on the lane: the
// probe image instead of ours (its PROBE_* variables say what to try), bound
// to node on the host network (no CNI), without the service account and
// priority class the test namespace lacks. Security context, environment,
// volumes and mounts are the chart's.
func chartPluginPod(ctx context.Context, t *testing.T, ns, name, node string, set ...string) *corev1.Pod {
	t.Helper()
	out := renderChart(ctx, t, "gpushare-system", "templates/deviceplugin.yaml", set...)
	var ds *appsv1.DaemonSet
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &d); err == nil && d.Kind == "DaemonSet" {
			ds = &d
		}
	}
	if ds == nil {
		t.Fatalf("the chart renders no DaemonSet:\n%s", out)
	}
	spec := ds.Spec.Template.Spec
	spec.NodeName, spec.NodeSelector = node, nil
	spec.ServiceAccountName, spec.AutomountServiceAccountToken = "", ptr.To(false)
	spec.PriorityClassName = ""
	spec.HostNetwork, spec.DNSPolicy = true, corev1.DNSDefault
	spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists})
	// The node's own identity the chart mounts (devicePlugin.nodeCredential): this host has no
	// kubeadm kubeconfig, so the host side is a file and directory made here; the mounts are the
	// chart's.
	host := t.TempDir()
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		switch {
		case v.Name == "node-kubeconfig" && v.HostPath != nil:
			v.HostPath.Path = filepath.Join(host, "kubelet.conf")
			if err := os.WriteFile(v.HostPath.Path, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(v.Name, "node-credential-") && v.HostPath != nil:
			v.HostPath.Path = filepath.Join(host, v.Name)
			if err := os.MkdirAll(v.HostPath.Path, 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every plugin container of the pod (the plugin, and its standby where the chart runs one).
	for i := range spec.Containers {
		ctr := &spec.Containers[i]
		ctr.Image, ctr.ImagePullPolicy, ctr.Command = probeImage, corev1.PullNever, nil
		// The probe serves no metrics, and the lane runs two copies of this pod
		// on one node at once (with and without the device mount): with host
		// networking the chart's metrics port would be a host port they share.
		ctr.Ports, ctr.ReadinessProbe = nil, nil
		ctr.Env = append(ctr.Env,
			corev1.EnvVar{Name: "PROBE_WRITE_DIRS", Value: strings.Join([]string{pluginPodSocketDir, "/var/lib/kubelet/pod-resources", pluginPodNodeCredential, "/"}, ":")},
			corev1.EnvVar{Name: "PROBE_CONNECT", Value: pluginPodSocket + ":" + pluginPodResources},
		)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

// checkPluginPodLeastPrivilege is the lane's check of the chart's device
// plugin pod: unprivileged, no capability, yet every card's device node is
// there and opens past the device cgroup (ENXIO: allowed, no driver behind a
// simulated node; EPERM would be the cgroup refusing it), the kubelet's
// sockets accept it and its socket directory takes a file, while the root
// filesystem and the PodResources directory are read-only.
func checkPluginPodLeastPrivilege(t *testing.T, pod *corev1.Pod, container int, seen kubeletnode.ProbeReport) {
	t.Helper()
	sc := pod.Spec.Containers[container].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged {
		t.Fatalf("the chart's device plugin container is privileged (%+v); the premise of this check is that it is not", sc)
	}
	if diff := cmp.Diff(devicesFor(0, 1), seen.Devices); diff != "" {
		t.Errorf("the device plugin's pod must see every card for NVML (-want +seen):\n%s", diff)
	}
	for _, d := range seen.Devices {
		if got := seen.Opens[d.Path]; got != "ENXIO" && got != "ok" {
			t.Errorf("opening %s: %s, want it allowed by the device cgroup (ENXIO on a simulated node)", d.Path, got)
		}
	}
	// Only CAP_KILL (bit 5), and only where the chart adds it: while memory
	// enforcement may kill a container's processes on the card.
	wantCaps, what := "0000000000000000", "none"
	if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, corev1.Capability("KILL")) {
		wantCaps, what = "0000000000000020", "CAP_KILL alone"
	}
	if seen.UID != 0 || seen.CapEff != wantCaps {
		t.Errorf("uid %d, effective capabilities %s; want root with %s (%s)", seen.UID, seen.CapEff, what, wantCaps)
	}
	want := map[string]string{pluginPodSocketDir: "ok", "/var/lib/kubelet/pod-resources": "EROFS", pluginPodNodeCredential: "EROFS", "/": "EROFS"}
	if diff := cmp.Diff(want, seen.Writable); diff != "" {
		t.Errorf("writable directories (-want +seen):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{pluginPodSocket: "ok", pluginPodResources: "ok"}, seen.Connects); diff != "" {
		t.Errorf("kubelet sockets (-want +seen):\n%s", diff)
	}
}

// createChartSecrets creates, in the pod's namespace, each Secret the
// chart's pod mounts (the record key: a random `current` key, as the chart
// generates it), so that the pod starts as in a real install.
func createChartSecrets(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			// The record public-key ConfigMap, as the extender writes it.
			pub, _, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v.ConfigMap.Name, Namespace: pod.Namespace},
				Data: map[string]string{api.RecordKeyCurrent: api.NodeKeyAnnotation(pub)}}
			if _, err := c.CoreV1().ConfigMaps(pod.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating the chart's ConfigMap %s: %v", v.ConfigMap.Name, err)
			}
			continue
		}
		if v.Secret == nil {
			continue
		}
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: v.Secret.SecretName, Namespace: pod.Namespace},
			Data: map[string][]byte{api.RecordKeyCurrent: podtest.EncodePrivateKey(priv)}}
		if _, err := c.CoreV1().Secrets(pod.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating the chart's Secret %s: %v", v.Secret.SecretName, err)
		}
	}
}
