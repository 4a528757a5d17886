package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// PluginCommand is a device plugin process the agent runs, as the container
// runtime would run the plugin's DaemonSet pod: in the agent's mount
// namespace (so it sees the agent's /var/lib/kubelet/device-plugins), with
// NODE_NAME set, restarted when it exits.
//
// The plugin's PID is kept in PIDFile. An agent that starts while the PID
// file names a live plugin adopts it instead of starting a second one: that
// is a kubelet restart with the plugin still running, and the plugin must
// notice the new kubelet.sock and register again.
type PluginCommand struct {
	// Path is the plugin binary; Args its arguments.
	Path string
	Args []string
	// Env is added to the agent's environment (NODE_NAME is always set).
	Env []string
	// LogFile receives the plugin's stdout and stderr (appended).
	LogFile string
	// PIDFile holds the running plugin's PID.
	PIDFile string
	// LeaveRunning keeps the plugin running when the agent stops (for a
	// kubelet-restart test); by default the agent stops it.
	LeaveRunning bool
	// RestartDelay is the pause before restarting a plugin that exited
	// (default 1 s).
	RestartDelay time.Duration
}

func (p *PluginCommand) validate() error {
	switch {
	case p.Path == "":
		return errors.New("device plugin: no binary path")
	case p.LogFile == "":
		return errors.New("device plugin: no log file")
	case p.PIDFile == "":
		return errors.New("device plugin: no PID file")
	}
	if _, err := os.Stat(p.Path); err != nil {
		return fmt.Errorf("device plugin binary: %w", err)
	}
	if p.RestartDelay <= 0 {
		p.RestartDelay = time.Second
	}
	return nil
}

// Supervise checks the command and keeps it running until ctx ends, then
// stops it (unless LeaveRunning). Any long-running program can be supervised
// this way (the container lane's kubelet is); node is set as NODE_NAME.
func (p *PluginCommand) Supervise(ctx context.Context, node string) error {
	if err := p.validate(); err != nil {
		return err
	}
	p.supervise(ctx, node)
	return nil
}

// supervise keeps the plugin running until ctx ends, then stops it unless
// LeaveRunning.
func (p *PluginCommand) supervise(ctx context.Context, node string) {
	logger := klog.FromContext(ctx).WithValues("plugin", p.Path)
	for ctx.Err() == nil {
		if pid, ok := p.livePID(); ok {
			logger.Info("Adopted running device plugin", "pid", pid)
			// Not our child: poll until it exits or we are asked to stop.
			_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
				return !processAlive(pid), nil
			})
			if ctx.Err() != nil {
				p.stop(logger, pid)
				return
			}
			logger.Info("Device plugin exited; restarting", "pid", pid)
		} else {
			cmd, err := p.start(node)
			if err != nil {
				logger.Error(err, "Starting device plugin")
			} else {
				logger.Info("Started device plugin", "pid", cmd.Process.Pid, "log", p.LogFile)
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				select {
				case err := <-exited:
					logger.Info("Device plugin exited; restarting", "pid", cmd.Process.Pid, "err", err)
					_ = os.Remove(p.PIDFile)
				case <-ctx.Done():
					p.stop(logger, cmd.Process.Pid)
					if !p.LeaveRunning {
						<-exited
					}
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.RestartDelay):
		}
	}
}

func (p *PluginCommand) start(node string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open plugin log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(append(os.Environ(), "NODE_NAME="+node), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the agent's process group does not reach
	// it, the agent decides.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Path, err)
	}
	if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("write plugin PID file: %w", err)
	}
	return cmd, nil
}

// stop ends the plugin with SIGTERM (SIGKILL after 10 s), unless LeaveRunning.
func (p *PluginCommand) stop(logger klog.Logger, pid int) {
	if p.LeaveRunning {
		logger.Info("Leaving device plugin running", "pid", pid)
		return
	}
	logger.Info("Stopping device plugin", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return !processAlive(pid), nil
	}); err != nil {
		logger.Info("Device plugin did not stop in 10 s; killing it", "pid", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(p.PIDFile)
}

// livePID returns the PID in PIDFile if that process is alive and runs this
// plugin's binary (a recycled PID is somebody else's).
func (p *PluginCommand) livePID() (int, bool) {
	b, err := os.ReadFile(p.PIDFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !processAlive(pid) {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	if string(argv0) != p.Path {
		return 0, false
	}
	return pid, true
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	return stat[i+2] != 'Z'
}
