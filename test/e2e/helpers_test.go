package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/test/cluster"
)

// gpuNode starts a simulated GPU node running gpushare's device plugin with
// the given simulated cards (--nvml=spec:...), labelled for the plugin
// (api.LabelEnabled), waits until it is Ready with its inventory and
// capacity, and removes it when the test ends. Options change what the
// tests need changed (withNames, withPluginArgs, withLabels).
func gpuNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name, spec string, opts ...nodeOption) (*cluster.Node, api.Inventory) {
	t.Helper()
	cfg := nodeConfig{names: api.DefaultNames(), labels: api.LabelEnabled + "=true"}
	for _, o := range opts {
		o(&cfg)
	}
	names := cfg.names
	config := filepath.Join(t.TempDir(), "device-plugin-config.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("apiVersion: gpushare.example.com/v1alpha1\nkind: DevicePluginConfiguration\nnames: {domain: %s, resourceName: %s, wholeResourceName: %s}\n",
		names.Domain(), names.ResourceName(), names.WholeResourceName())), 0o644); err != nil {
		t.Fatal(err)
	}
	node, err := c.StartNode(cluster.NodeOptions{
		Name: name, AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
		Labels:             cfg.labels,
		PluginBinary:       pluginBinary(t),
		PluginArgs:         append([]string{"--nvml=spec:" + spec, "--config=" + config}, cfg.args...),
		ExtraArgs:          cfg.agentArgs,
		LeavePluginRunning: cfg.leavePlugin,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Errorf("stopping node agent %s: %v", name, err)
		}
		if cfg.leavePlugin {
			node.StopPlugin()
		}
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	inv := waitInventoryAfter(ctx, t, c, names, node, "")
	return node, inv
}

// nodeConfig is what gpuNode's options set.
type nodeConfig struct {
	names  api.Names
	labels string
	args   []string
	// agentArgs are the node agent's own flags.
	agentArgs []string
	// leavePlugin keeps the plugin running when the agent stops (a kubelet restart).
	leavePlugin bool
}

// nodeOption changes how gpuNode starts a node.
type nodeOption func(*nodeConfig)

// withNames runs the plugin under names (its --domain, --resource-name and
// --whole-resource-name).
func withNames(names api.Names) nodeOption { return func(c *nodeConfig) { c.names = names } }

// withAgentArgs adds flags to the node agent's command line.
func withAgentArgs(args ...string) nodeOption {
	return func(c *nodeConfig) { c.agentArgs = append(c.agentArgs, args...) }
}

// withPluginArgs adds flags to the plugin's command line.
func withPluginArgs(args ...string) nodeOption {
	return func(c *nodeConfig) { c.args = append(c.args, args...) }
}

// withPluginLeftRunning keeps the plugin running when the agent stops, as a
// kubelet restart leaves the plugin's container running; the test stops it.
func withPluginLeftRunning() nodeOption { return func(c *nodeConfig) { c.leavePlugin = true } }

// withLabels sets the node's labels ("k=v,k2=v2"; "" for none) in place of
// the plugin's label alone.
func withLabels(labels string) nodeOption { return func(c *nodeConfig) { c.labels = labels } }

// waitInventory waits until the node is Ready with the plugin's inventory,
// allocatable gpu-mem equal to the inventory's units and the plugin serving
// the kubelet (the inventory's notServing empty).
func waitInventory(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node) api.Inventory {
	t.Helper()
	return waitInventoryAfter(ctx, t, c, api.DefaultNames(), node, "")
}

// restartAgent stops the node's agent and starts it again with the same
// options; it returns the new one once it has posted the Node's status and
// the plugin's capacity is back (registered again with the new device
// manager, which reports zero until then) and its inventory says it serves.
func restartAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.Node) *cluster.Node {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Opts.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := cluster.ReadyMessage(n)
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted, err := c.StartNode(node.Opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	waitInventoryAfter(ctx, t, c, api.DefaultNames(), restarted, before)
	return restarted
}

func waitInventoryAfter(ctx context.Context, t *testing.T, c *cluster.Cluster, names api.Names, node *cluster.Node, before string) api.Inventory {
	t.Helper()
	var inv api.Inventory
	if _, err := cluster.WaitNodeAgentReplaced(ctx, c.Client, node.Opts.Name, before, 2*time.Minute, "Ready with inventory and capacity", func(n *corev1.Node) bool {
		got, err := names.InventoryFromNode(n)
		q := n.Status.Allocatable[names.ResourceName()]
		inv = got
		return err == nil && cluster.NodeReady(n) && q.Value() == got.TotalUnits() && q.Value() > 0 && got.NotServing == ""
	}); err != nil {
		t.Fatalf("%v\nagent log: %s", err, node.LogFile())
	}
	return inv
}

// testNamespace creates a namespace for the test (named prefix-<random>),
// deleted, pods and all, when the test ends.
func testNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, prefix string) string {
	t.Helper()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := ns.Name
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(name).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// registryPause is the image of the lane's pods that only have to run.
const registryPause = "registry.k8s.io/pause:3.10"

// gpuPod builds a pod scheduled by the extender's profile, one container per
// entry of units (named c0, c1, ...), each asking for that many gpu-mem units.
func gpuPod(ns, name string, units ...int64) *corev1.Pod {
	b := podtest.Make(ns, name)
	for i, u := range units {
		b.GPU(fmt.Sprintf("c%d", i), u)
	}
	return lanePod(b, registryPause)
}

// lanePod is the pod b builds as the lane's cluster is to create it: no UID
// (the API server gives one), scheduled by the extender's profile, every
// container running image, stopped within a second.
func lanePod(b *podtest.Builder, image string) *corev1.Pod {
	pod := b.UID("").Image(image).Obj()
	pod.Spec.SchedulerName = schedulerName
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	return pod
}

// runPod creates the pod and waits until it runs.
func runPod(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, node *cluster.Node) *corev1.Pod {
	t.Helper()
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitRunning(ctx, t, c, pod.Namespace, pod.Name, node)
}

func waitRunning(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, node *cluster.Node) *corev1.Pod {
	t.Helper()
	got, err := cluster.WaitPod(ctx, c.Client, ns, name, 2*time.Minute, "Running", cluster.PodRunning)
	if err != nil {
		t.Fatalf("%v\nextender log: %s\nagent log: %s", err, extender.LogPath, node.LogFile())
	}
	return got
}

// recordSettle bounds how long a pod's assignment may lag behind what its
// containers got. Allocate carries no pod identity: when the kubelet admits
// same-size pods in another order than the plugin guessed, the plugin
// corrects the record right after Allocate or at its next reconciliation with
// the kubelet's PodResources API (docs/protocol.md). The containers themselves
// always get the card of their unit IDs.
const recordSettle = 30 * time.Second

// checkCards checks a running pod end to end: it has a valid assignment for
// its node, and (within recordSettle) every container's record — what the
// kubelet's device manager handed it — is exactly its assigned card: one card
// mount at that UUID, the assigned number of units, all of that card. It
// returns the pod's settled assignment.
func checkCards(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) api.Assignment {
	t.Helper()
	return checkCardsNamed(ctx, t, c, api.DefaultNames(), pod)
}

// checkCardsNamed is checkCards for a pod placed under names.
func checkCardsNamed(ctx context.Context, t *testing.T, c *cluster.Cluster, names api.Names, pod *corev1.Pod) api.Assignment {
	t.Helper()
	var asg api.Assignment
	var problems []string
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, cluster.PollInterval, recordSettle, true, func(ctx context.Context) (bool, error) {
		if problems != nil { // not the first look: read the pod again
			fresh, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			pod = fresh
		}
		asg, problems = cardProblems(t, names, pod)
		return len(problems) == 0, nil
	})
	if err != nil {
		for _, p := range problems {
			t.Errorf("pod %s: %s (still after %v)", pod.Name, p, recordSettle)
		}
		return asg
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("pod %s: record matched the containers' cards after %v", pod.Name, d.Round(time.Millisecond))
	}
	return asg
}

// cardProblems lists where the pod's assignment and its containers' records
// disagree.
func cardProblems(t *testing.T, names api.Names, pod *corev1.Pod) (api.Assignment, []string) {
	t.Helper()
	asg, err := names.AssignmentFromPod(pod)
	if err != nil {
		return asg, []string{err.Error()}
	}
	var problems []string
	if asg.Node != pod.Spec.NodeName {
		problems = append(problems, fmt.Sprintf("assignment for node %q, bound to %q", asg.Node, pod.Spec.NodeName))
	}
	// A container starts once its record names its card; the phase may follow (the record
	// writer sets Allocated after PreStartContainer when the card was right already).
	if asg.Phase != api.PhaseAllocated && !api.Admitted(pod) {
		problems = append(problems, fmt.Sprintf("assignment phase %s of a pod not admitted, want %s", asg.Phase, api.PhaseAllocated))
	}
	for _, ca := range asg.Containers {
		rec := containerRecord(t, pod, ca.Name)
		var mounts []string
		for _, m := range rec.Mounts {
			if strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/") {
				mounts = append(mounts, strings.TrimPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/"))
			}
		}
		if len(mounts) != 1 || mounts[0] != ca.CardUUID {
			problems = append(problems, fmt.Sprintf("container %s: card mounts %v, assignment says [%s]", ca.Name, mounts, ca.CardUUID))
		}
		ids := rec.DeviceIDs[string(names.ResourceName())]
		if int64(len(ids)) != ca.Units {
			problems = append(problems, fmt.Sprintf("container %s: %d units allocated by the kubelet, assignment says %d", ca.Name, len(ids), ca.Units))
		}
		for _, id := range ids {
			if uuid, _, err := api.ParseUnitID(id); err != nil || uuid != ca.CardUUID {
				problems = append(problems, fmt.Sprintf("container %s: kubelet unit %s is not of the assigned card %s", ca.Name, id, ca.CardUUID))
				break
			}
		}
	}
	return asg, problems
}

// checkCapacity lists the running pods on the node and checks that no card
// holds more assigned units than it has, and that no kubelet unit is held by
// two containers. It returns the used units per card UUID.
func checkCapacity(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, inv api.Inventory) map[string]int64 {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{}
	holder := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		asg := checkCards(ctx, t, c, p)
		for _, ca := range asg.Containers {
			used[ca.CardUUID] += ca.Units
			for _, id := range containerRecord(t, p, ca.Name).DeviceIDs[string(api.DefaultNames().ResourceName())] {
				if other, ok := holder[id]; ok {
					t.Errorf("unit %s held by %s and %s/%s", id, other, p.Name, ca.Name)
				}
				holder[id] = p.Name + "/" + ca.Name
			}
		}
	}
	for uuid, u := range used {
		card, ok := inv.CardByUUID(uuid)
		if !ok {
			t.Errorf("units assigned on unknown card %s", uuid)
			continue
		}
		if u > card.Units {
			t.Errorf("card %d (%s): %d units assigned, capacity %d", card.Index, uuid, u, card.Units)
		}
	}
	return used
}

// usage formats used units per card index, for logs.
func usage(inv api.Inventory, used map[string]int64) string {
	var parts []string
	for _, card := range inv.Cards {
		parts = append(parts, fmt.Sprintf("card %d: %d/%d", card.Index, used[card.UUID], card.Units))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
