// Package e2e is gpushare's end-to-end suite: a real control plane
// (hack/cluster.sh: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler on 127.0.0.1) and simulated GPU nodes (test/nodeagent: the
// real kubelet device manager) in one process tree. See docs/e2e.md.
//
// Without the control-plane binaries (make cluster-binaries) the tests skip,
// unless GPUSHARE_E2E=1 (as `make e2e` sets), where they fail.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/test/cluster"
)

var (
	// skipReason, when set, is why the suite cannot run here.
	skipReason string
	// binDir holds the binaries TestMain built (the node agent).
	binDir string
	// env is the shared control plane, started once for the package.
	env *cluster.Cluster
	// extender is gpushare's scheduler extender, when the program and the
	// project's KubeSchedulerConfiguration exist; kube-scheduler calls it.
	extender *cluster.Process
	// extenderBin and extenderPort let a test restart the extender.
	extenderBin  string
	extenderPort int
	// schedulerName is the profile pods name to be scheduled (by the
	// project's configuration when the extender runs).
	schedulerName = "default-scheduler"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	required := os.Getenv("GPUSHARE_E2E") == "1"
	if missing := cluster.MissingBinaries(cluster.BinDir()); len(missing) > 0 {
		skipReason = fmt.Sprintf("control-plane binaries %s missing in %s: run `make cluster-binaries`", strings.Join(missing, ", "), cluster.BinDir())
		if required {
			fmt.Fprintln(os.Stderr, "e2e:", skipReason)
			return 1
		}
		return m.Run()
	}
	var err error
	binDir, err = os.MkdirTemp("", "gpushare-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	start := time.Now()
	if err := goBuild(filepath.Join(binDir, "gpushare-nodeagent"), "./nodeagent/cmd"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: built the node agent in %v\n", time.Since(start).Round(time.Millisecond))

	state, err := os.MkdirTemp("", "gpushare-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	opts := cluster.Options{StateDir: state, Log: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "e2e: "+f+"\n", a...)
	}}
	// With the extender written, kube-scheduler runs the project's
	// configuration pointing at it.
	schedConfig := filepath.Join(cluster.RepoRoot(), cluster.SchedulerConfigFile)
	extenderBin = filepath.Join(binDir, "gpushare-scheduler")
	if _, err := os.Stat(filepath.Join(cluster.RepoRoot(), "scheduler", "main.go")); err == nil {
		if _, err := os.Stat(schedConfig); err == nil {
			start := time.Now()
			if err := goBuildProduct(extenderBin, "./scheduler"); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
			fmt.Fprintf(os.Stderr, "e2e: built the extender in %v\n", time.Since(start).Round(time.Millisecond))
			if schedulerName, err = cluster.SchedulerName(schedConfig); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
			if extenderPort, err = cluster.FreePort(); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
			opts.SchedulerConfig = schedConfig
			opts.ExtenderURL = fmt.Sprintf("http://127.0.0.1:%d", extenderPort)
			// The API server asks the extender's node-scope webhook about the
			// device plugin identity of TestDevicePluginReadsOnlyItsOwnNode.
			authz, scopeArgs, err := nodeScopeAuthorization(state)
			if err != nil {
				fmt.Fprintln(os.Stderr, "e2e: node-scope webhook:", err)
				return 1
			}
			opts.AuthorizationConfig = authz
			config := filepath.Join(state, "extender-config.yaml")
			if err := os.WriteFile(config, []byte(extenderConfig), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
			extenderArgs = append([]string{"--config", config}, scopeArgs...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start = time.Now()
	env, err = cluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: control plane:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: control plane up in %v (state %s)\n", time.Since(start).Round(time.Millisecond), state)
	code := 0
	if err := keepConfigMapParams(ctx, env); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	if extenderPort != 0 {
		start = time.Now()
		extender, err = env.StartExtender(ctx, extenderBin, extenderPort, extenderArgs...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: extender:", err)
			code = 1
		} else {
			fmt.Fprintf(os.Stderr, "e2e: extender ready in %v (scheduler name %q)\n", time.Since(start).Round(time.Millisecond), schedulerName)
		}
	}
	if code == 0 {
		code = m.Run()
	}
	if extender != nil {
		if err := extender.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the extender:", err)
			code = 1
		}
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: stopping the control plane:", err)
		code = 1
	}
	if code == 0 && os.Getenv("GPUSHARE_E2E_KEEP") == "" {
		_ = os.RemoveAll(state)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: state and logs kept in %s\n", state)
	}
	return code
}

// setup skips the test when the suite cannot run here.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	return env
}

// extenderArgs are the extender's flags besides kubeconfig and listen: its
// configuration file (extenderConfig) and the node-scope webhook's.
var extenderArgs []string

// extenderConfig is the extender's configuration file. Pods may name spread
// (TestPodsChooseTheirCardsAndPolicy); the others run under binpack. The
// device plugin pods the node agents keep (pluginPodArgs) are followed as the
// chart's are. /inspect shows the DRA claims, as the chart's extender does
// with dra.enabled (TestInspectorShowsDRAClaims).
const extenderConfig = `apiVersion: gpushare.example.com/v1alpha1
kind: SchedulerConfiguration
policy: binpack
allowedPolicies: [binpack, spread]
devicePluginSelector: ` + pluginPodLabel + `
dra: true
`

// pluginPodLabel is the label of the device plugin pods the node agents keep
// with pluginPodArgs, and the extender's --device-plugin-selector.
const pluginPodLabel = "app.kubernetes.io/component=device-plugin"

// pluginPodArgs make a node agent keep its plugin's pod in namespace, Ready
// while the plugin serves, as the chart's DaemonSet pod is.
func pluginPodArgs(namespace string) []string {
	return []string{"--plugin-pod-namespace", namespace, "--plugin-pod-labels", pluginPodLabel}
}

// needExtender skips the test when the extender does not run.
func needExtender(t *testing.T) {
	t.Helper()
	if extender == nil {
		t.Skip("the gpushare extender (scheduler/main.go) or its kube-scheduler configuration does not exist yet")
	}
}

// needRoot skips (or, under GPUSHARE_E2E=1, fails) a test that needs root
// for the node agent's mount namespace.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("GPUSHARE_E2E") == "1" {
		t.Fatal("the node agent's private mount namespace needs root")
	}
	t.Skip("the node agent's private mount namespace needs root")
}

// goBuild builds a package of the test module (path relative to test/). Like every build make
// test does, with -trimpath: one compile of the shared dependencies serves them all (and without
// DWARF, which only a debugger reads).
func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-w", "-o", out, pkg)
	cmd.Dir = filepath.Join(cluster.RepoRoot(), "test")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// goBuildProduct builds a package of the product module (path relative to
// the repository root).
func goBuildProduct(out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-w", "-o", out, pkg)
	cmd.Dir = cluster.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
