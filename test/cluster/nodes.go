package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// NodeOptions describe one simulated GPU node (a gpushare-nodeagent process).
type NodeOptions struct {
	// Name is the Node's name.
	Name string
	// AgentBinary is the built test/nodeagent/cmd program.
	AgentBinary string
	// StateDir is the node's directory (device-plugins/, pod-resources/,
	// plugin.pid, plugin.log, agent.log). Default: <cluster state>/nodes/<Name>.
	StateDir string
	// Labels are put on the Node when the agent creates it: "k=v,k2=v2".
	Labels string
	// PluginBinary and PluginArgs: the device plugin the agent runs, if any.
	PluginBinary string
	PluginArgs   []string
	// PluginEnv is extra plugin environment: "K=V,K2=V2".
	PluginEnv string
	// LeavePluginRunning keeps the plugin alive when the agent stops.
	LeavePluginRunning bool
	// NoDeviceManager runs the agent without the kubelet device manager.
	NoDeviceManager bool
	// ExtraArgs are more agent flags (e.g. "-v=4").
	ExtraArgs []string
}

// Node is a running node agent.
type Node struct {
	Opts NodeOptions
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartNode starts a node agent for the cluster. The agent registers its
// Node; wait for readiness with the API (e.g. WaitNodeReady).
func (c *Cluster) StartNode(opts NodeOptions) (*Node, error) {
	if opts.Name == "" || opts.AgentBinary == "" {
		return nil, errors.New("cluster: a node needs a name and the agent binary")
	}
	if opts.StateDir == "" {
		opts.StateDir = c.NodeStateDir(opts.Name)
	}
	if opts.PluginBinary != "" {
		abs, err := filepath.Abs(opts.PluginBinary)
		if err != nil {
			return nil, fmt.Errorf("cluster: plugin binary: %w", err)
		}
		opts.PluginBinary = abs
	}
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: node dir: %w", err)
	}
	args := []string{"--node", opts.Name, "--kubeconfig", c.Kubeconfig, "--state-dir", opts.StateDir}
	if opts.Labels != "" {
		args = append(args, "--labels", opts.Labels)
	}
	if opts.NoDeviceManager {
		args = append(args, "--no-device-manager")
	}
	if opts.LeavePluginRunning {
		args = append(args, "--leave-plugin-running")
	}
	if opts.PluginEnv != "" {
		args = append(args, "--plugin-env", opts.PluginEnv)
	}
	args = append(args, opts.ExtraArgs...)
	if opts.PluginBinary != "" {
		args = append(args, "--plugin", opts.PluginBinary, "--")
		args = append(args, opts.PluginArgs...)
	}
	logf, err := os.OpenFile(filepath.Join(opts.StateDir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: agent log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(opts.AgentBinary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start node agent %s: %w", opts.Name, err)
	}
	n := &Node{Opts: opts, cmd: cmd, done: make(chan struct{})}
	go func() {
		n.err = cmd.Wait()
		close(n.done)
	}()
	return n, nil
}

// NodeStateDir is the default state directory of the named node:
// <cluster state>/nodes/<name>, kept with the logs when a run fails.
func (c *Cluster) NodeStateDir(name string) string {
	return filepath.Join(c.opts.StateDir, "nodes", name)
}

// PID is the agent's process ID.
func (n *Node) PID() int { return n.cmd.Process.Pid }

// LogFile is the agent's log.
func (n *Node) LogFile() string { return filepath.Join(n.Opts.StateDir, "agent.log") }

// PluginPID is the PID the agent recorded for its device plugin (0 if none).
func (n *Node) PluginPID() int { return n.readPID("plugin.pid") }

// StandbyPluginPID is the PID the agent recorded for its standby plugin
// (agent flag --plugin-standby; nodeagent.StandbyPIDFileName; 0 if none).
func (n *Node) StandbyPluginPID() int { return n.readPID("plugin-standby.pid") }

func (n *Node) readPID(file string) int {
	b, err := os.ReadFile(filepath.Join(n.Opts.StateDir, file))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// registrationLine is what the kubelet's device manager (v1.34) logs when a
// device plugin registers; the agent's log is the harness's own file.
const registrationLine = "Got registration request from device plugin"

// Registrations counts the device-plugin registrations the node's device
// managers (this agent and its predecessors on the same state dir) accepted.
// Wait for it to grow after restarting a plugin: until the plugin registers
// again, the device manager keeps the old, stopped endpoint and refuses
// Allocate.
func (n *Node) Registrations() int {
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		return 0
	}
	return strings.Count(string(b), registrationLine)
}

// Exited reports whether the agent process has ended, and how.
func (n *Node) Exited() (bool, error) {
	select {
	case <-n.done:
		return true, n.err
	default:
		return false, nil
	}
}

// Stop ends the agent with SIGTERM (SIGKILL after 20 s) and waits for it. If
// the agent was not asked to leave its plugin running, a plugin still alive
// afterwards (agent killed) is stopped too. Safe to call more than once.
func (n *Node) Stop() error {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	if !n.Opts.LeavePluginRunning {
		n.StopPlugin()
	}
	var exitErr *exec.ExitError
	if n.err != nil && !errors.As(n.err, &exitErr) {
		return n.err
	}
	return nil
}

// StopPlugin stops the device plugins recorded in the node's PID files
// (the plugin and its standby), each if it still runs that binary.
func (n *Node) StopPlugin() {
	for _, pid := range []int{n.PluginPID(), n.StandbyPluginPID()} {
		n.stopPlugin(pid)
	}
}

func (n *Node) stopPlugin(pid int) {
	if pid <= 0 || n.Opts.PluginBinary == "" {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.HasPrefix(string(cmdline), n.Opts.PluginBinary+"\x00") {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err != nil, nil
	}) != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
