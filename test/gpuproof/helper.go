package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// helper is a running "hold" process, driven line by line.
type helper struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	PID   int
	Ready string // the first line
	// cleanup, when set, runs after the helper ended (close).
	cleanup func()
}

// startHelper starts this program as the holding helper on card with the
// extra environment env, and waits for its first line.
func startHelper(card int, sim bool, env []string) (*helper, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"--card", strconv.Itoa(card)}
	if sim {
		args = append(args, "--sim")
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(append(os.Environ(), roleEnv+"=hold"), env...)
	return startHelperCmd(cmd)
}

// startHelperCmd starts cmd, a "hold" helper however wrapped, and waits for
// its first line.
func startHelperCmd(cmd *exec.Cmd) (*helper, error) {
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &helper{cmd: cmd, in: in, lines: make(chan string, 16), PID: cmd.Process.Pid}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	first, err := h.next(60 * time.Second)
	if err != nil {
		h.close()
		return nil, err
	}
	h.Ready = first
	if !strings.HasPrefix(first, "ready ") {
		h.close()
		return nil, fmt.Errorf("helper: %s", first)
	}
	return h, nil
}

func (h *helper) next(timeout time.Duration) (string, error) {
	select {
	case l, ok := <-h.lines:
		if !ok {
			return "", fmt.Errorf("helper (pid %d) exited", h.PID)
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("helper (pid %d) did not answer in %v", h.PID, timeout)
	}
}

// do sends one command and returns the helper's answer.
func (h *helper) do(command string) (string, error) {
	if _, err := fmt.Fprintln(h.in, command); err != nil {
		return "", err
	}
	return h.next(60 * time.Second)
}

// wait waits for the helper to exit and returns how it ended.
func (h *helper) wait(timeout time.Duration) (string, error) {
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return "exited 0", nil
		}
		return err.Error(), nil
	case <-time.After(timeout):
		return "", fmt.Errorf("helper (pid %d) still running after %v", h.PID, timeout)
	}
}

// close ends the helper: stdin closed, then killed if it lingers.
func (h *helper) close() {
	_ = h.in.Close()
	if _, err := h.wait(10 * time.Second); err != nil {
		_ = h.cmd.Process.Kill()
		_, _ = h.wait(5 * time.Second)
	}
	if h.cleanup != nil {
		h.cleanup()
	}
}
