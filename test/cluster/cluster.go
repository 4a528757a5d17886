// Package cluster starts and stops gpushare's local end-to-end environment
// from Go tests: the control plane of hack/cluster.sh (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler on 127.0.0.1, free ports, a state
// directory per run) and simulated GPU nodes (test/nodeagent processes).
// Every process it starts is stopped by PID.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/test/k8sversion"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Components are the control plane's binaries, as hack/build-k8s.sh names them.
var Components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// K8sVersion is the Kubernetes version this run uses (k8sversion.Current).
func K8sVersion() string { return k8sversion.Current() }

// Options configure a control plane.
type Options struct {
	// RepoRoot is the repository's root (hack/cluster.sh lives below it).
	// Default: found from this source file.
	RepoRoot string
	// StateDir holds certs, etcd data, kubeconfig, pids/ and logs/. Required.
	StateDir string
	// BinDir holds the control-plane binaries. Default: BinDir().
	BinDir string
	// SchedulerConfig is a KubeSchedulerConfiguration for kube-scheduler and
	// ExtenderURL the extender's URL to put in it (see hack/cluster.sh).
	// Empty: kube-scheduler runs its defaults, without an extender.
	SchedulerConfig string
	ExtenderURL     string
	// KCMControllers is kube-controller-manager's --controllers (default
	// "*": all, node lifecycle included). "*,-node-lifecycle-controller"
	// keeps Nodes that nothing heartbeats Ready (API-object nodes).
	KCMControllers string
	// APIServerAddress is where pods reach the API server (a pod network's
	// gateway): kube-apiserver then listens on every address and the
	// kubernetes Service's endpoints name this one (hack/cluster.sh).
	// Empty: 127.0.0.1 only.
	APIServerAddress string
	// SchedulerQPS and SchedulerBurst are kube-scheduler's API client budget
	// (clientConnection.qps/burst; 0: kube-scheduler's defaults, 50 and 100).
	SchedulerQPS, SchedulerBurst int
	// AuthorizationConfig is an AuthorizationConfiguration file for
	// kube-apiserver's --authorization-config (empty: --authorization-mode=RBAC).
	AuthorizationConfig string
	// Log receives the script's output (default: discarded).
	Log func(format string, args ...any)
}

// Cluster is a running control plane.
type Cluster struct {
	opts       Options
	env        []string
	Kubeconfig string
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	// Ports the components listen on, on 127.0.0.1.
	Ports map[string]int
}

// BinDir is where hack/build-k8s.sh puts the binaries:
// $GPUSHARE_K8S_BIN, else ${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/k8s-<K8sVersion()>/bin.
func BinDir() string {
	if d := os.Getenv("GPUSHARE_K8S_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("GPUSHARE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpushare")
	}
	return filepath.Join(cache, "k8s-"+K8sVersion(), "bin")
}

// MissingBinaries lists the components missing from dir.
func MissingBinaries(dir string) []string {
	var missing []string
	for _, c := range Components {
		if st, err := os.Stat(filepath.Join(dir, c)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, c)
		}
	}
	return missing
}

// RepoRoot is the repository root: the nearest folder at or above the working directory that
// holds hack/cluster.sh (tests run in their package's folder, the bench programs in the root).
// It does not use this source file's path, which -trimpath builds (make test's) do not keep.
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("cluster: working directory: %v", err))
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "hack", "cluster.sh")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			panic(fmt.Sprintf("cluster: no hack/cluster.sh in %s or a folder above it: run from inside the gpushare repository", dir))
		}
	}
}

// Start brings the control plane up with hack/cluster.sh on free ports and
// returns once every component is healthy. On error nothing stays running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StateDir == "" {
		return nil, errors.New("cluster: no state directory")
	}
	if opts.RepoRoot == "" {
		opts.RepoRoot = RepoRoot()
	}
	if opts.BinDir == "" {
		opts.BinDir = BinDir()
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	if m := MissingBinaries(opts.BinDir); len(m) > 0 {
		return nil, fmt.Errorf("cluster: %s missing in %s: run `make cluster-binaries` (hack/build-k8s.sh)", strings.Join(m, ", "), opts.BinDir)
	}
	names := []string{"ETCD", "ETCD_PEER", "APISERVER", "KCM", "SCHEDULER"}
	ports, err := freePorts(len(names))
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, Kubeconfig: filepath.Join(opts.StateDir, "kubeconfig"), Ports: map[string]int{}}
	c.env = append(os.Environ(), "GPUSHARE_STATE="+opts.StateDir, "GPUSHARE_K8S_BIN="+opts.BinDir)
	if opts.SchedulerQPS > 0 {
		c.env = append(c.env, fmt.Sprintf("GPUSHARE_SCHEDULER_QPS=%d", opts.SchedulerQPS), fmt.Sprintf("GPUSHARE_SCHEDULER_BURST=%d", max(opts.SchedulerBurst, opts.SchedulerQPS)))
	}
	if opts.APIServerAddress != "" {
		c.env = append(c.env, "GPUSHARE_APISERVER_ADDRESS="+opts.APIServerAddress)
	}
	if opts.AuthorizationConfig != "" {
		c.env = append(c.env, "GPUSHARE_AUTHORIZATION_CONFIG="+opts.AuthorizationConfig)
	}
	if opts.KCMControllers != "" {
		c.env = append(c.env, "GPUSHARE_KCM_CONTROLLERS="+opts.KCMControllers)
	}
	for i, n := range names {
		c.Ports[n] = ports[i]
		c.env = append(c.env, fmt.Sprintf("GPUSHARE_%s_PORT=%d", n, ports[i]))
	}
	args := []string{"up"}
	if opts.SchedulerConfig != "" {
		args = append(args, "--scheduler-config", opts.SchedulerConfig)
	}
	if opts.ExtenderURL != "" {
		args = append(args, "--extender-url", opts.ExtenderURL)
	}
	if err := c.script(ctx, args...); err != nil {
		return nil, err // the script stops what it started when up fails
	}
	c.RESTConfig, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("cluster: kubeconfig: %w", err)
	}
	c.RESTConfig.QPS, c.RESTConfig.Burst = 100, 200
	c.Client, err = kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("cluster: client: %w", err)
	}
	return c, nil
}

// Stop stops every control-plane process by its PID. It can be called more
// than once.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.script(ctx, "down")
}

// RestartScheduler stops kube-scheduler and starts it again (with the same
// configuration), waiting until it is healthy.
func (c *Cluster) RestartScheduler(ctx context.Context) error {
	if err := c.script(ctx, "stop", "kube-scheduler"); err != nil {
		return err
	}
	args := []string{"up"}
	if c.opts.SchedulerConfig != "" {
		args = append(args, "--scheduler-config", c.opts.SchedulerConfig)
	}
	if c.opts.ExtenderURL != "" {
		args = append(args, "--extender-url", c.opts.ExtenderURL)
	}
	return c.script(ctx, args...)
}

// RestartSchedulerWith stops kube-scheduler and starts it again with another
// KubeSchedulerConfiguration and extender URL (empty: kube-scheduler's
// defaults, no extender), waiting until it is healthy. Later restarts keep
// the new configuration.
func (c *Cluster) RestartSchedulerWith(ctx context.Context, schedulerConfig, extenderURL string) error {
	c.opts.SchedulerConfig, c.opts.ExtenderURL = schedulerConfig, extenderURL
	return c.RestartScheduler(ctx)
}

// PID is the process ID of a running control-plane component ("etcd",
// "kube-apiserver", "kube-controller-manager", "kube-scheduler"), from the
// script's pids/ directory.
func (c *Cluster) PID(component string) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.opts.StateDir, "pids", component+".pid"))
	if err != nil {
		return 0, fmt.Errorf("cluster: pid of %s: %w", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("cluster: pid of %s: %w", component, err)
	}
	return pid, nil
}

// StateDir is the cluster's state directory.
func (c *Cluster) StateDir() string { return c.opts.StateDir }

// LogFile is the path of a component's log.
func (c *Cluster) LogFile(component string) string {
	return filepath.Join(c.opts.StateDir, "logs", component+".log")
}

// Kubectl runs the cached kubectl against the cluster and returns its
// combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *Cluster) script(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(c.opts.RepoRoot, "hack", "cluster.sh")}, args...)...)
	cmd.Env = c.env
	// On a cancelled context the script gets SIGTERM: it stops what it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line != "" {
			c.opts.Log("%s", line)
		}
	}
	if err != nil {
		return fmt.Errorf("hack/cluster.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
