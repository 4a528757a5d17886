package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// SchedulerConfigFile is the project's KubeSchedulerConfiguration (the
// extender's verbs, weight, managed resources), relative to the repository.
const SchedulerConfigFile = "scheduler/config/kube-scheduler-config.yaml"

// SchedulerName is the first profile's schedulerName in a
// KubeSchedulerConfiguration file ("default-scheduler" when it names none):
// the name pods must carry to be scheduled by the extender.
func SchedulerName(configFile string) (string, error) {
	b, err := os.ReadFile(configFile)
	if err != nil {
		return "", err
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", configFile, err)
	}
	if len(cfg.Profiles) == 0 || cfg.Profiles[0].SchedulerName == "" {
		return "default-scheduler", nil
	}
	return cfg.Profiles[0].SchedulerName, nil
}

// StartExtender starts the gpushare extender (gpushare-scheduler) against the
// cluster, listening on 127.0.0.1:port, and waits for its /readyz (caches
// synced). The kube-scheduler must have been started with ExtenderURL
// http://127.0.0.1:port.
func (c *Cluster) StartExtender(ctx context.Context, binary string, port int, args ...string) (*Process, error) {
	all := append([]string{"--kubeconfig", c.Kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, args...)
	p, err := StartProcess("gpushare-scheduler", filepath.Join(c.opts.StateDir, "logs", "gpushare-scheduler.log"), binary, all...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), time.Minute); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}
