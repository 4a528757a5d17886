package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Process is a program the harness started (e.g. the extender), with its
// output in a log file. Stop ends it by PID.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProcess starts binary with args in its own process group, output
// appended to logPath.
func StartProcess(name, logPath, binary string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM (SIGKILL after 20 s) and waits. Safe to call twice.
func (p *Process) Stop() error { return p.StopWithin(20 * time.Second) }

// StopWithin sends SIGTERM (SIGKILL after grace) and waits. Safe to call twice.
func (p *Process) StopWithin(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		return p.err
	}
	return nil
}

// WaitHTTP polls url until it answers 200, the process exits, or timeout.
func (p *Process) WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%s exited: %v (log %s)", p.Name, err, p.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s within %v: %w (log %s)", p.Name, url, timeout, err, p.LogPath)
	}
	return nil
}

// FreePort returns a port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
