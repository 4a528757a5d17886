package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryFailsWithOneLine builds the real binary and checks what a user
// sees when it fails: one "error: ..." line on stderr, nothing on stdout
// (no usage dump, no client-go logging), and the documented exit code.
func TestBinaryFailsWithOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "kubectl-inspect-gpushare")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	emptyConfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(emptyConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantLine string
	}{
		{"unreachable cluster", []string{"--server", closed}, nil, 1, "error: cannot reach the Kubernetes API server at " + closed},
		{"no kubeconfig", nil, []string{"KUBECONFIG=" + emptyConfig, "HOME=" + t.TempDir(), "KUBERNETES_SERVICE_HOST="}, 1, "error: no Kubernetes configuration found"},
		{"bad output format", []string{"-o", "xml"}, nil, 2, `error: unknown output format "xml"`},
		{"unknown flag", []string{"--colour"}, nil, 2, "error: unknown flag: --colour"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Env = append(os.Environ(), c.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("run: %v, want an exit status", err)
			}
			if exit.ExitCode() != c.wantCode {
				t.Errorf("exit code %d, want %d", exit.ExitCode(), c.wantCode)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], c.wantLine) {
				t.Errorf("stderr %q, want one line starting with %q", stderr.String(), c.wantLine)
			}
		})
	}
}
