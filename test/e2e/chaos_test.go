package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/chaos"
	"github.com/gpushare/gpushare/test/cluster"
)

// The chaos run's size: `make test` runs the short default, `make chaos
// SEED=n OPS=2000` the long one (docs/e2e.md, "The chaos run").
var (
	chaosSeed      = flag.Uint64("chaos.seed", 1, "seed of the chaos run's operation sequence")
	chaosOps       = flag.Int("chaos.ops", 200, "operations of the chaos run")
	chaosKeepGoing = flag.Bool("chaos.keep-going", false, "record violations and go on instead of stopping at the first")
	chaosPluginPod = flag.Bool("chaos.plugin-pods", true, "node agents keep their plugin's pod, Ready while it serves, and the extender places no GPU pod where it is not (false: no plugin pods, as before the extender followed them)")
	chaosLog       = flag.String("chaos.log", "", "write the run's report with its operation log (each rejected pod with its cause) to this file, also when the run passes")
	chaosStandby   = flag.Bool("chaos.standby", true, "each node runs a standby plugin beside its plugin, as the chart's pod does, and kill-plugin kills one of the two in turn, once the other is registered with the kubelet (false: one plugin per node)")
)

// chaosLabel is on the chaos run's Nodes (set by their agents at creation);
// the run's pods select it, so no other test's node takes them.
const chaosLabel = "gpushare-chaos"

// The chaos run's nodes: a node of two equal cards, a mixed node, a node of
// four small cards.
var chaosNodes = []struct{ name, spec string }{
	{"chaos-a", "2x40GiB:NVIDIA-A100"},
	{"chaos-b", "1x80GiB:NVIDIA-H100,1x24GiB:NVIDIA-L4"},
	{"chaos-c", "4x24GiB:NVIDIA-L4"},
}

// Issue 16, "Chaos run". A seeded random sequence of operations — bare pods
// of every shape (one to three containers, containers without a request,
// init containers, sizes that fit nowhere), bursts of same-size pods,
// deletions, Deployment scaling, SIGKILL and restart of the extender, of a
// device plugin and of a node agent (the kubelet), card isolation on and
// off, concurrent writers — on three simulated GPU nodes. After every
// operation: no card over capacity in the records, in the kubelet's
// PodResources account or in the extender; every Running container's record
// names the card whose units it got, at that very observation; every pod
// kube-scheduler judged unschedulable says why with the extender's reason;
// no pod the run created is lost. At the end: settled, then everything
// deleted and every card back to zero in the extender, the inventory, the
// kubelet and the inspector. A violation stops the run with the seed, the
// operation log and the state.
func TestChaos(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	timeout := 10*time.Minute + time.Duration(*chaosOps)*2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	plugin := pluginBinary(t)
	inspector := productBinary(t, "kubectl-inspect-gpushare", "inspector")

	var mu sync.Mutex
	nodes := map[string]*cluster.Node{}
	topo := chaos.Topology{Deployments: []string{"d-small", "d-multi"}}
	var names []string
	// Node status as the kubelet posts it (every 10 s), so that after a
	// plugin's crash kube-scheduler sees the old allocatable as long as on a
	// real node.
	agentArgs := []string{"--node-status-update-frequency=10s"}
	if *chaosPluginPod {
		agentArgs = append(agentArgs, pluginPodArgs(testNamespace(ctx, t, c, "plugins"))...)
	}
	if *chaosStandby {
		agentArgs = append(agentArgs, "--plugin-standby")
	}
	kills := map[string]int{} // kill-plugins per node: with a standby, the two are killed in turn
	for _, n := range chaosNodes {
		node, err := c.StartNode(cluster.NodeOptions{
			Name: n.name, AgentBinary: filepath.Join(binDir, "gpushare-nodeagent"),
			Labels:       api.LabelEnabled + "=true," + chaosLabel + "=true",
			PluginBinary: plugin,
			PluginArgs:   []string{"--nvml=spec:" + n.spec},
			ExtraArgs:    agentArgs,
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.name] = node
		names = append(names, n.name)
		inv := waitInventory(ctx, t, c, node)
		spec := chaos.NodeSpec{Name: n.name}
		for _, card := range inv.Cards {
			spec.Cards = append(spec.Cards, card.Units)
		}
		topo.Nodes = append(topo.Nodes, spec)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for name, node := range nodes {
			if err := node.Stop(); err != nil {
				t.Errorf("stopping node agent %s: %v", name, err)
			}
			_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	ns := testNamespace(ctx, t, c, "chaos")
	// The chart's creation-time admission policies, as installed: a pod that
	// could never run (larger than the largest card, 0, an init container
	// asking) is refused at creation with the policy's message, sized by an
	// extender publishing the largest card. (The record policies are left
	// out: this suite's programs run with the admin's credentials, not the
	// chart's service accounts.)
	system := testNamespace(ctx, t, c, "gpushare-system")
	applyAdmissionPolicySubset(ctx, t, c, system, []string{"gpushare-pod-create", "gpushare-request-size"})
	enforceAdmission(ctx, t, c, system, ns)
	publisherPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	publisher, err := c.StartExtender(ctx, extenderBin, publisherPort, "--card-limits-configmap", system+"/"+api.CardLimitsConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Stop() })
	largest := int64(0)
	for _, n := range topo.Nodes {
		for _, u := range n.Cards {
			largest = max(largest, u)
		}
	}
	waitCardLimit(ctx, t, c, system, strconv.FormatInt(largest, 10))
	waitAdmissionRefuses(ctx, t, c, ns, largest)

	hooks := chaos.Hooks{
		KillExtender: func(ctx context.Context) error {
			if err := killGroup(extender.PID()); err != nil {
				return err
			}
			if err := waitExited(ctx, extender.Exited); err != nil {
				return fmt.Errorf("extender: %w", err)
			}
			var err error
			extender, err = c.StartExtender(ctx, extenderBin, extenderPort, extenderArgs...)
			return err
		},
		KillPlugin: func(ctx context.Context, name string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			node := nodes[name]
			victim, other := node.PluginPID, node.StandbyPluginPID
			otherLog := filepath.Join(node.Opts.StateDir, "plugin-standby.log")
			if *chaosStandby && kills[name]%2 == 1 {
				victim, other = other, victim
				otherLog = filepath.Join(node.Opts.StateDir, "plugin.log")
			}
			kills[name]++
			covered := false
			if *chaosStandby {
				// A crash of one plugin while the other serves, which is what a standby
				// absorbs: the other plugin (killed at the node's previous kill-plugin,
				// restarted after 1 s) is registered again first. Two crashes within
				// that second leave the node with no plugin, as on a node without one.
				covered = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
					return registered(other(), otherLog), nil
				}) == nil
			}
			pid := victim()
			if pid == 0 {
				return covered, nil // between plugin lives: the agent is restarting it
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				return false, fmt.Errorf("kill plugin of %s: %w", name, err)
			}
			return covered, nil
		},
		KillAgent: func(ctx context.Context, name string) error {
			mu.Lock()
			defer mu.Unlock()
			old := nodes[name]
			// The agent and its re-executed child (one process group); the
			// plugin, in its own session, lives on as after a kubelet crash.
			if err := killGroup(old.PID()); err != nil {
				return err
			}
			if err := waitExited(ctx, old.Exited); err != nil {
				return fmt.Errorf("agent %s: %w", name, err)
			}
			fresh, err := c.StartNode(old.Opts)
			if err != nil {
				return err
			}
			nodes[name] = fresh
			return nil
		},
		Inspector: func(ctx context.Context) ([]byte, error) {
			cmd := exec.CommandContext(ctx, inspector, "--kubeconfig", c.Kubeconfig, "-o", "json")
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("kubectl-inspect-gpushare -o json: %w", err)
			}
			return out, nil
		},
		Ready: func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if done, err := extender.Exited(); done {
				return fmt.Errorf("extender exited: %v", err)
			}
			for name, node := range nodes {
				n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				inv, err := api.DefaultNames().InventoryFromNode(n)
				if err != nil {
					return err
				}
				var healthy int64
				for _, card := range inv.Cards {
					if card.State == api.CardHealthy {
						healthy += card.Units
					}
				}
				q := n.Status.Allocatable[api.DefaultNames().ResourceName()]
				if !cluster.NodeReady(n) || q.Value() != healthy {
					return fmt.Errorf("node %s: ready %v, allocatable %d, healthy units %d", name, cluster.NodeReady(n), q.Value(), healthy)
				}
				if done, _ := node.Exited(); done {
					return fmt.Errorf("agent %s exited (log %s)", name, node.LogFile())
				}
			}
			return nil
		},
	}
	r := &chaos.Runner{
		Client: c.Client, Namespace: ns, SchedulerName: schedulerName,
		NodeSelector: map[string]string{chaosLabel: "true"},
		Topology:     topo,
		Deployments:  []chaos.Deployment{{Name: "d-small", Units: []int64{4}}, {Name: "d-multi", Units: []int64{10, 0, 6}}},
		Observer: &chaos.Observer{
			Client: c.Client, Namespace: ns, Nodes: names,
			PodResourcesSocket: func(node string) string {
				return filepath.Join(c.NodeStateDir(node), "pod-resources", "kubelet.sock")
			},
			ExtenderURL: fmt.Sprintf("http://127.0.0.1:%d", extenderPort),
		},
		Hooks:        hooks,
		Seed:         *chaosSeed,
		KeepGoing:    *chaosKeepGoing,
		InspectEvery: 25,
		Logf:         t.Logf,
	}
	plan := chaos.Plan(*chaosSeed, *chaosOps, topo)
	t.Logf("chaos: seed %d, %d operations on %v", *chaosSeed, len(plan), topo.Nodes)
	rep, err := r.Run(ctx, plan)
	replay := fmt.Sprintf("make chaos SEED=%d OPS=%d", *chaosSeed, *chaosOps)
	if *chaosLog != "" && rep != nil {
		if err := os.WriteFile(*chaosLog, []byte(rep.Text(replay)), 0o644); err != nil {
			t.Errorf("-chaos.log: %v", err)
		}
	}
	if err != nil || !rep.OK() {
		t.Errorf("%s\n%s\nlogs: %s (extender %s, nodes %s/nodes/NODE/{agent,plugin}.log)", errText(err), rep.Text(replay), c.StateDir(), extender.LogPath, c.StateDir())
		return
	}
	t.Logf("chaos %s", rep.Summary())
	t.Logf("kinds: %v; refused at creation: %v; rejected by the kubelet: %v", rep.Kinds, rep.Refused, rep.Rejected)
}

// registered reports whether the plugin process pid runs (not a zombie) and has registered both
// its resources with the node's device manager: its log (logFile) has its "Registered with the
// kubelet" lines (klog writes the PID in each line's header).
func registered(pid int, logFile string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := strings.LastIndexByte(string(stat), ')'); err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		return false
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, fmt.Sprintf(" %d run.go", pid)) && strings.Contains(line, "Registered with the kubelet") {
			n++
		}
	}
	return n >= 2
}

// killGroup SIGKILLs a process group the harness started (Setpgid: the
// group's ID is the leader's PID).
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("kill process group %d: %w", pid, err)
	}
	return nil
}

func waitExited(ctx context.Context, exited func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		done, _ := exited()
		return done, nil
	})
}

func errText(err error) string {
	if err == nil {
		return "run completed"
	}
	return "run stopped: " + err.Error()
}
