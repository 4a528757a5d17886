package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// StartScheduler starts a second kube-scheduler against the cluster, beside
// the one hack/cluster.sh runs: config is a KubeSchedulerConfiguration
// (profiles, extenders) without clientConnection or leaderElection, which are
// added (this cluster's kubeconfig; leader election off, so that it does not
// wait for the first scheduler's lease). name names its configuration and log
// files in the state directory. Give it profiles no other scheduler of the
// cluster has (kube-scheduler ignores pods of other profiles). It serves no
// health endpoint; a test waits for what it schedules.
func (c *Cluster) StartScheduler(name, config string) (*Process, error) {
	if strings.Contains(config, "clientConnection:") || strings.Contains(config, "leaderElection:") {
		return nil, fmt.Errorf("scheduler %s: the configuration sets clientConnection or leaderElection; StartScheduler sets them", name)
	}
	file := filepath.Join(c.opts.StateDir, name+"-config.yaml")
	full := strings.TrimRight(config, "\n") + "\nleaderElection:\n  leaderElect: false\nclientConnection:\n  kubeconfig: " + c.Kubeconfig + "\n"
	if err := os.WriteFile(file, []byte(full), 0o644); err != nil {
		return nil, err
	}
	return StartProcess(name, filepath.Join(c.opts.StateDir, "logs", name+".log"), filepath.Join(c.opts.BinDir, "kube-scheduler"),
		"--config="+file, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false")
}
