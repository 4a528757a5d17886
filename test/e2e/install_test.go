package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/kubeletnode"
)

// The install lane: the chart as an operator installs it, with helm from a registry onto a real
// node (kubelet, containerd pulling the image over TLS, NVIDIA's runtime in CDI mode, simulated
// cards) that has a pod network (Debian's CNI bridge) and kube-proxy. The previous release is
// installed first and upgraded to this tree's with docs/install.md's commands (release_test.go).
// Only what this machine forces is overridden (docs/e2e.md, "The install lane").

const (
	installPodCIDR = "10.244.0.0/24"
	// installGateway is the bridge's address, where pods reach the API server
	// (the kubernetes Service's endpoint; kube-proxy sends 10.0.0.1:443 there).
	installGateway   = "10.244.0.1"
	installNamespace = "gpushare-system"
	installRelease   = "gpushare"
	installNode      = "install-node"
)

// installOverrides are the only values the lane sets, each forced by this machine.
var installOverrides = []string{
	// No GPU here: the plugin serves simulated cards (the node's CDI spec describes the same ones).
	"devicePlugin.extraArgs={--nvml=spec:" + laneGPUs + "}",
	// One node, a GPU node: the extender may run there (by default it avoids GPU nodes).
	"scheduler.avoidGPUNodes=false",
}

// laneNodeCredential returns the values that point the chart's devicePlugin.nodeCredential at the
// lane node's own identity (system:node:NODE), written on this host: there is no kubeadm
// /etc/kubernetes/kubelet.conf here, and the lane's kubelet runs as the cluster's admin. Its
// server is the address pods reach the API server at.
func laneNodeCredential(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	kubeconfig, err := c.NodeKubeconfig(installNode, filepath.Join(c.StateDir(), "node-credential"), fmt.Sprintf("https://%s:%d", installGateway, c.Ports["APISERVER"]))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"devicePlugin.nodeCredential.kubeconfig=" + kubeconfig, "devicePlugin.nodeCredential.hostPaths={" + filepath.Dir(kubeconfig) + "}"}
}

// schedulerArchive is the kube-scheduler image the chart names, made from the kube-scheduler
// binary the lane built (the lane has no route to registry.k8s.io).
func schedulerArchive(t *testing.T, tag string) string {
	t.Helper()
	sched := filepath.Join(binDir, "kube-scheduler.oci.tar")
	if err := kubeletnode.WriteOCIArchive(sched, kubeletnode.Image{
		Name:  "registry.k8s.io/kube-scheduler:" + tag,
		Files: map[string]string{"/usr/local/bin/kube-scheduler": filepath.Join(cluster.BinDir(), "kube-scheduler")},
		Env:   []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	}); err != nil {
		t.Fatal(err)
	}
	return sched
}

// installReleases are what the lane published: the previous release and this tree's, and the
// previous release's source tree.
type installReleases struct {
	registry          *laneRegistry
	previous, current release
	previousTree      string
}

// installLane starts a registry and publishes both releases to it, then a control plane pods can
// reach, the real node with a pod network and kube-proxy, its containerd trusting the registry.
func installLane(ctx context.Context, t *testing.T) (*cluster.Cluster, *cluster.KubeletNode, installReleases) {
	t.Helper()
	needRoot(t)
	tools := needLane(t)
	for _, need := range []string{filepath.Join(cluster.BinDir(), "kube-proxy"), "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/sbin/iptables"} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("install lane: %s missing: run hack/container-lane.sh (make e2e does)", need)
		}
	}
	state, err := os.MkdirTemp("", "gpushare-install-")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(ctx, cluster.Options{StateDir: state, APIServerAddress: installGateway})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the install lane's control plane: %v", err)
		}
		if !t.Failed() {
			_ = os.RemoveAll(state)
		} else {
			t.Logf("install lane state and logs kept in %s", state)
		}
	})
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	schedulerTag := regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+`).FindString(v.GitVersion)
	sched := schedulerArchive(t, schedulerTag)
	rel := installReleases{registry: startRegistry(t)}
	rel.previous, rel.current, rel.previousTree = rel.registry.publishBoth(t)

	proxyPorts := [2]int{}
	for i := range proxyPorts {
		if proxyPorts[i], err = cluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	proxyBin := filepath.Join(cluster.BinDir(), "kube-proxy")
	proxy, err := cluster.StartProcess("kube-proxy", filepath.Join(state, "logs", "kube-proxy.log"), proxyBin,
		"--kubeconfig", c.Kubeconfig, "--hostname-override", installNode, "--cluster-cidr", installPodCIDR,
		"--proxy-mode", "iptables", "--bind-address", "127.0.0.1", "--conntrack-max-per-core", "0",
		"--healthz-bind-address", fmt.Sprintf("127.0.0.1:%d", proxyPorts[0]),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", proxyPorts[1]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proxy.Stop()
		if out, err := exec.Command(proxyBin, "--cleanup").CombinedOutput(); err != nil {
			t.Logf("kube-proxy --cleanup: %v\n%s", err, out)
		}
	})

	node, err := c.StartKubeletNode(cluster.KubeletNodeOptions{
		Name: installNode, Binary: laneArtifacts.node, Tools: tools,
		NvidiaRuntime: true, GPUs: laneGPUs, PodCIDR: installPodCIDR,
		Images:            []string{laneArtifacts.pauseT, laneArtifacts.probeTar, sched},
		PauseImage:        pauseImage,
		Labels:            "gpushare=true", // the chart's devicePlugin.nodeSelector
		RegistryConfigDir: rel.registry.hostsDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node %s: %v", installNode, err)
		}
	})
	if _, err := cluster.WaitNode(ctx, c.Client, installNode, 3*time.Minute, "Ready (pod network up)", func(n *corev1.Node) bool {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	}); err != nil {
		t.Fatalf("%v\n%s", err, node.Logs())
	}
	return c, node, rel
}

// helmCommand is the helm the chart checks use, against the lane's cluster.
func helmCommand(t *testing.T, c *cluster.Cluster, args ...string) *exec.Cmd {
	t.Helper()
	path, err := exec.Command(filepath.Join(cluster.RepoRoot(), "hack", "tools.sh"), "helm").Output()
	if err != nil {
		t.Fatalf("hack/tools.sh helm: %v", err)
	}
	cmd := exec.Command(strings.TrimSpace(string(path)), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	return cmd
}

// helmFrom runs helm with the registry's CA trusted and fails the test if it fails.
func helmFrom(t *testing.T, c *cluster.Cluster, r *laneRegistry, args ...string) string {
	t.Helper()
	cmd := helmCommand(t, c, args...)
	cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+r.caFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// helm runs helm and fails the test if it fails.
func helm(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	out, err := helmCommand(t, c, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitInstalled waits until the device plugin DaemonSet and the scheduler Deployment run the
// image (repository@digest, as the kubelet reports a pulled image), every pod of them ready.
func waitInstalled(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, digest string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := map[string]bool{}
		var states []string
		for _, p := range pods.Items {
			comp := p.Labels["app.kubernetes.io/component"]
			ok := p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == len(p.Spec.Containers)
			for _, cs := range p.Status.ContainerStatuses {
				if !cs.Ready || (cs.Name != "kube-scheduler" && !strings.HasSuffix(cs.ImageID, digest)) {
					ok = false
				}
				states = append(states, fmt.Sprintf("%s/%s ready=%v image=%s id=%s waiting=%v", p.Name, cs.Name, cs.Ready, cs.Image, cs.ImageID, cs.State.Waiting))
			}
			if len(p.Status.ContainerStatuses) == 0 {
				states = append(states, fmt.Sprintf("%s %s %v", p.Name, p.Status.Phase, p.Status.Conditions))
			}
			if prev, seen := ready[comp]; seen {
				ok = ok && prev
			}
			ready[comp] = ok
		}
		last = strings.Join(states, "\n")
		return ready["device-plugin"] && ready["scheduler"] && len(ready) == 2, nil
	})
	if err != nil {
		t.Fatalf("the chart's pods on image %s: %v; last:\n%s\n%s", digest, err, last, node.Logs())
	}
}

// installPod is a probe pod the chart's kube-scheduler places: on the pod network, asking for
// units of GPU memory (none: no request).
func installPod(ns, name string, units int64) *corev1.Pod {
	pod := probePod(ns, name, units)
	pod.Spec.SchedulerName = "gpushare-scheduler"
	pod.Spec.HostNetwork = false
	pod.Spec.DNSPolicy = corev1.DNSClusterFirst
	return pod
}

// leftovers lists what gpushare left in the cluster: annotations and labels under the names'
// domain on nodes, annotations on pods, and Secrets in the release namespace.
func leftovers(ctx context.Context, t *testing.T, c kubernetes.Interface, domain string) []string {
	t.Helper()
	var out []string
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for k := range n.Annotations {
			if strings.HasPrefix(k, domain+"/") {
				out = append(out, "node annotation "+k)
			}
		}
		for k := range n.Labels {
			if strings.HasPrefix(k, domain+"/") {
				out = append(out, "node label "+k)
			}
		}
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for k := range p.Annotations {
			if strings.HasPrefix(k, domain+"/") {
				out = append(out, "pod annotation "+k)
			}
		}
	}
	secrets, err := c.CoreV1().Secrets(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out = append(out, "secret "+s.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// An operator's install, upgrade and uninstall of the chart as shipped (admission policies,
// record signing on), on a real node from our images.
func TestInstallLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c, node, rel := installLane(ctx, t)
	names := api.DefaultNames()
	// docsHelm is docs/install.md's helm command starting with prefix, for release r, with the
	// lane's overrides: the arguments after "helm".
	docsHelm := func(prefix string, r release, overrides []string) []string {
		args := docsCommand(t, prefix, docsRegistry, r.push, "<version>", r.version)[1:]
		for _, o := range overrides {
			args = append(args, "--set", o)
		}
		return append(args, "--wait", "--timeout", "5m")
	}
	start := time.Now()
	helmFrom(t, c, rel.registry, docsHelm("helm install gpushare oci://", rel.previous, overridesFor(t, filepath.Join(rel.previousTree, "charts", "gpushare")))...)
	waitInstalled(ctx, t, c, node, rel.previous.image)
	t.Logf("helm install of the previous release (%s): the chart's pods ready on %s after %v", previousRelease[:7], rel.previous.image, time.Since(start).Round(time.Second))
	ns := testNamespace(ctx, t, c, "install")

	var before *corev1.Pod
	var beforeRecord string
	if !t.Run("a GPU pod runs on its card under the previous release", func(t *testing.T) {
		before = runProbePod(ctx, t, c, node, installPod(ns, "before", 4))
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if before, beforeRecord = got, got.Annotations[names.AnnotationAssignment()]; beforeRecord == "" {
			t.Fatalf("pod %s runs without a record", before.Name)
		}
	}) {
		return
	}

	if !t.Run("helm upgrade from the previous release under load keeps running pods' cards and records; no pod created meanwhile Failed", func(t *testing.T) {
		args := docsHelm("helm upgrade gpushare oci://", rel.current, append(installOverrides, laneNodeCredential(t, c)...))
		rolloutUnderLoad(ctx, t, c, node, rel, ns, args)
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != before.UID || got.Status.Phase != corev1.PodRunning || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s after the upgrade: uid %s (was %s), %s, restarts %d", before.Name, got.UID, before.UID, got.Status.Phase, got.Status.ContainerStatuses[0].RestartCount)
		}
		if rec := got.Annotations[names.AnnotationAssignment()]; rec != beforeRecord {
			t.Errorf("pod %s: record changed by the upgrade:\n was %s\n now %s", before.Name, beforeRecord, rec)
		}
	}) {
		return
	}
	if !t.Run("a rollout of this release's plugin under load fails no pod", func(t *testing.T) {
		// The same chart with its plugin configuration spelled out (the default allocate wait):
		// the configuration's checksum changes, so the DaemonSet rolls its pods, and nothing else.
		overrides := append(append(installOverrides, laneNodeCredential(t, c)...), "devicePlugin.config.allocateWait=10s")
		rolloutUnderLoad(ctx, t, c, node, rel, ns, docsHelm("helm upgrade gpushare oci://", rel.current, overrides))
	}) {
		return
	}
	t.Run("the released image holds kubectl-inspect-gpushare where docs/install.md says", func(t *testing.T) {
		m := regexp.MustCompile("`crane export <image> - \\| tar -xf - (\\S+)`").FindStringSubmatch(docsLine(t, "`crane export "))
		if m == nil {
			t.Fatal("docs/install.md names no `crane export <image> - | tar -xf - PATH`")
		}
		path := strings.TrimPrefix(m[1], "/")
		rel.registry.imageHasFile(t, rel.current.image, path)
	})

	var gpu *corev1.Pod
	if !t.Run("a GPU pod goes Pending to Running on its card through the chart's scheduler", func(t *testing.T) {
		pod := installPod(ns, "gpu", 4)
		created, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Status.Phase != corev1.PodPending || created.Spec.NodeName != "" {
			t.Fatalf("a new pod is %s on %q, want Pending and unbound", created.Status.Phase, created.Spec.NodeName)
		}
		_ = c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err := cluster.WaitPodGone(ctx, c.Client, ns, pod.Name, time.Minute); err != nil {
			t.Fatal(err)
		}
		gpu = runProbePod(ctx, t, c, node, installPod(ns, "gpu", 4))
		asg := allocatedAssignment(ctx, t, c, gpu)
		verifyRecord(ctx, t, c, gpu)
		seen := probeSees(ctx, t, node, gpu, "c0", time.Time{})
		checkContainerSeesItsCard(t, gpu, asg.Containers[0], asg, seen)
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, gpu.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gpu = got
		if out, err := inspectHealth(t, c); err != nil || !strings.HasPrefix(out, "healthy: ") {
			t.Errorf("kubectl inspect gpushare health after the install: %v\n%s", err, out)
		} else {
			t.Logf("kubectl inspect gpushare health: %s", strings.TrimSpace(out))
		}
		t.Logf("pod %s on card %d (%s), pod IP %s", gpu.Name, asg.Containers[0].CardIndex, asg.Containers[0].CardUUID, gpu.Status.PodIP)
	}) {
		return
	}
	t.Run("a pod without a request sees no GPU", func(t *testing.T) {
		pod := runProbePod(ctx, t, c, node, installPod(ns, "nogpu", 0))
		checkContainerSeesNoCard(t, pod, "c0", probeSees(ctx, t, node, pod, "c0", time.Time{}))
	})

	t.Run("a SIGKILL of either plugin container fails no GPU pod created through it", func(t *testing.T) {
		keep := map[string]bool{gpu.Name: true, before.Name: true}
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if !keep[p.Name] {
				_ = c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		for _, p := range pods.Items {
			if !keep[p.Name] {
				if err := cluster.WaitPodGone(ctx, c.Client, ns, p.Name, 2*time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkPluginCrashesFailNoPod(ctx, t, c, node.KubeletLog(), ns)
	})

	t.Run("helm uninstall leaves what docs/install.md lists, and its commands remove it", func(t *testing.T) {
		helm(t, c, "uninstall", installRelease, "-n", installNamespace, "--wait", "--timeout", "3m")
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, gpu.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			t.Errorf("GPU pod after uninstall: %v %v, want it still Running", err, got.Status.Phase)
		}
		if out, err := inspectHealth(t, c); err == nil || !strings.Contains(out, "no gpushare device plugin DaemonSet in namespace "+installNamespace) {
			t.Errorf("kubectl inspect gpushare health after the uninstall: %v, want it to fail naming the missing DaemonSet:\n%s", err, out)
		}
		remains := leftovers(ctx, t, c.Client, names.Domain())
		t.Logf("left after helm uninstall:\n  %s", strings.Join(remains, "\n  "))
		doc, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "install.md"))
		if err != nil {
			t.Fatal(err)
		}
		section := string(doc)
		if loc := regexp.MustCompile(`(?m)^## .*Uninstall`).FindStringIndex(section); loc != nil {
			section = section[loc[0]:]
			if j := strings.Index(section[3:], "\n## "); j >= 0 {
				section = section[:j+3]
			}
		} else {
			t.Fatal(`docs/install.md has no "## … Uninstall" section`)
		}
		for _, r := range remains {
			item := r[strings.LastIndex(r, " ")+1:]
			item = strings.TrimPrefix(item, names.Domain()+"/")
			item = strings.TrimPrefix(item, installRelease+"-")
			if !strings.Contains(section, item) {
				t.Errorf("left after uninstall but not in docs/install.md's Uninstall section: %s", r)
			}
		}
		if len(remains) == 0 {
			t.Error("nothing left after uninstall: the record key Secret is kept on purpose (helm.sh/resource-policy: keep)")
		}
		for _, cmd := range uninstallCommands(t, c, section) {
			out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
			if err != nil {
				t.Errorf("docs/install.md's command %q: %v\n%s", cmd, err, out)
			}
		}
		_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		if err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0, nil
		}); err != nil {
			t.Fatalf("the test's pods not gone: %v", err)
		}
		if left := leftovers(ctx, t, c.Client, names.Domain()); len(left) > 0 {
			t.Errorf("after docs/install.md's clean-up commands and deleting the pods: %v", left)
		}
	})
}

// verifyRecord checks the pod's record is Allocated and signed by its node, whose key the Node
// publishes, over an extender record signed with the chart's record key Secret.
func verifyRecord(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	verifyAssignment(ctx, t, c, pod.Name, allocatedAssignment(ctx, t, c, pod))
}

// settleDuring waits for a pod created during the upgrade to be Running with its record
// holding (api.HeldPhase), Failed, or Pending with a reason (no t: it runs in the load's goroutine).
func settleDuring(ctx context.Context, c *cluster.Cluster, ns, name string) (*corev1.Pod, error) {
	return cluster.WaitPod(ctx, c.Client, ns, name, 3*time.Minute, "Running with its record Allocated, Failed, or Pending with a reason", func(p *corev1.Pod) bool {
		switch p.Status.Phase {
		case corev1.PodPending, "":
			return pendingReason(p) != ""
		case corev1.PodRunning:
			a, err := api.DefaultNames().AssignmentFromPod(p)
			return err == nil && api.HeldPhase(p, a) == api.PhaseAllocated
		}
		return true
	})
}

// verifyAssignment checks that pod's record asg is signed with the chart's record key or its
// node's published key.
func verifyAssignment(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string, asg api.Assignment) {
	t.Helper()
	secret, err := c.Client.CoreV1().Secrets(installNamespace).Get(ctx, installRelease+"-record-key", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's record key: %v", err)
	}
	keys, err := api.RecordKeysFrom(secret.Data)
	if err != nil {
		t.Fatalf("the chart's record key Secret: %v", err)
	}
	// The plugin's correction (Allocated) is signed with its node key,
	// trusted with the key its Node publishes.
	if err := verifier(ctx, t, c, keys, asg.Node).Verify(asg); err != nil {
		t.Errorf("pod %s: record not signed with the chart's key or its node's published key: %v", pod, err)
	}
}

// inspectHealth runs `kubectl inspect gpushare health` (the inspector built from this tree)
// against the lane's cluster.
func inspectHealth(t *testing.T, c *cluster.Cluster) (string, error) {
	t.Helper()
	bin := filepath.Join(binDir, "kubectl-inspect-gpushare")
	if _, err := os.Stat(bin); err != nil {
		if err := goBuildProduct(bin, "./inspector"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "health", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	return string(out), err
}

// pendingReason is why a Pending pod waits for a node: its PodScheduled condition's message. A
// pod bound to the node and still creating its container has none yet (it is on its way to
// Running), nor has one the scheduler has not looked at.
func pendingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// uninstallCommands are the kubectl lines of docs/install.md's Uninstall section's clean-up
// block (```sh ... ```, lines starting with "kubectl"), with kubectl pointed at the lane.
func uninstallCommands(t *testing.T, c *cluster.Cluster, section string) []string {
	t.Helper()
	var cmds []string
	kubectl := filepath.Join(cluster.BinDir(), "kubectl") + " --kubeconfig " + c.Kubeconfig
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "kubectl ") {
			cmds = append(cmds, kubectl+strings.TrimPrefix(line, "kubectl"))
		}
		if strings.HasPrefix(line, "## ") && len(cmds) > 0 {
			break
		}
	}
	if len(cmds) == 0 {
		t.Fatal("docs/install.md's Uninstall section has no kubectl clean-up command")
	}
	return cmds
}

// rolloutUnderLoad runs helm with args (an upgrade to this tree's release) while GPU pods keep
// arriving in ns, until the device plugin pods that ran before are gone and the chart's pods are
// ready on this release's image: no pod created meanwhile may fail (the plugin that stops answers
// what the kubelet asked it; the new one is Ready only once the kubelet moved to it and the old
// one has had time to). It checks each such pod's record and deletes them all.
func rolloutUnderLoad(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.KubeletNode, rel installReleases, ns string, args []string) {
	t.Helper()
	names := api.DefaultNames()
	plugins, err := c.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=device-plugin"})
	if err != nil || len(plugins.Items) == 0 {
		t.Fatalf("the device plugin's pods before the rollout: %v (%d)", err, len(plugins.Items))
	}
	// A pod every 0.5 s from just before `helm upgrade` until this release's plugin and extender
	// are ready and the old ones gone: some reach the node while its plugin is handed over. At
	// most duringWindow of them live at once (the lane's kubelet runs 30 pods): the oldest is let
	// settle, kept, and deleted before the next is created.
	const duringWindow = 12
	type settledPod struct {
		name string
		pod  *corev1.Pod
		err  error
	}
	stop, created := make(chan struct{}), make(chan []settledPod, 1)
	start := time.Now()
	go func() {
		var live []string
		var done []settledPod
		defer func() {
			for _, name := range live {
				p, err := settleDuring(ctx, c, ns, name)
				done = append(done, settledPod{name, p, err})
			}
			created <- done
		}()
		for i := 0; ; i++ {
			pod := installPod(ns, fmt.Sprintf("during-%d", i), 2)
			pod.GenerateName, pod.Name = pod.Name+"-", ""
			if p, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Errorf("create %s during the rollout: %v", pod.GenerateName, err)
			} else {
				live = append(live, p.Name)
			}
			if len(live) >= duringWindow {
				p, err := settleDuring(ctx, c, ns, live[0])
				done = append(done, settledPod{live[0], p, err})
				_ = c.Client.CoreV1().Pods(ns).Delete(ctx, live[0], metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				live = live[1:]
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	cmd := helmCommand(t, c, args...)
	cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+rel.registry.caFile)
	out, err := cmd.CombinedOutput()
	if err == nil {
		for _, p := range plugins.Items {
			if err = cluster.WaitPodGone(ctx, c.Client, installNamespace, p.Name, 4*time.Minute); err != nil {
				break
			}
		}
	}
	if err != nil {
		close(stop)
		<-created
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	waitInstalled(ctx, t, c, node, rel.current.image)
	rolled := time.Since(start)
	checkHandOverHold(ctx, t, c)
	close(stop)
	during := <-created
	t.Logf("rollout under load: the previous plugin pods gone and the chart's pods ready after %v; %d pods created meanwhile, settled after %v", rolled.Round(time.Second), len(during), time.Since(start).Round(time.Second))
	for _, d := range during {
		p := d.pod
		switch {
		case d.err != nil:
			t.Errorf("%v", d.err)
		case p.Status.Phase == corev1.PodFailed:
			t.Errorf("pod %s created during the rollout Failed: %s %s", d.name, p.Status.Reason, p.Status.Message)
		case p.Status.Phase == corev1.PodRunning:
			a, err := names.AssignmentFromPod(p)
			if err != nil {
				t.Errorf("pod %s: %v", d.name, err)
			} else {
				verifyAssignment(ctx, t, c, p.Name, a)
			}
		default:
			t.Logf("pod %s: %s (%s)", d.name, p.Status.Phase, pendingReason(p))
		}
	}
	// Free the cards for what follows.
	for _, d := range during {
		_ = c.Client.CoreV1().Pods(ns).Delete(ctx, d.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	for _, d := range during {
		if err := cluster.WaitPodGone(ctx, c.Client, ns, d.name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
}

// checkHandOverHold checks that each device plugin pod turned Ready no sooner than the hand-over
// hold after its containers started: it started beside another pod's plugin, so it holds its
// readiness for the longest kubelet call (the chart's allocateWait, 10 s, + 5 s) after the
// kubelet moved to it. Timestamps have whole seconds.
func checkHandOverHold(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	const hold = 15 * time.Second
	pods, err := c.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=device-plugin"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		var started, ready time.Time
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(started) {
				started = r.StartedAt.Time
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = cond.LastTransitionTime.Time
			}
		}
		if d := ready.Sub(started); started.IsZero() || ready.IsZero() || d < hold-time.Second {
			t.Errorf("device plugin pod %s Ready %v after its containers started, want at least the hand-over hold %v (the old pod is stopped once it is Ready)", p.Name, d, hold)
		} else {
			t.Logf("device plugin pod %s Ready %v after its containers started (hand-over hold %v)", p.Name, d, hold)
		}
	}
}
