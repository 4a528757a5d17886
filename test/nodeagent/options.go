package nodeagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are the agent program's command-line settings.
type Options struct {
	NodeName   string
	Kubeconfig string
	StateDir   string
	Labels     string
	PluginPath string
	// PluginArgs are the plugin's arguments (the command line after "--").
	PluginArgs         []string
	PluginEnv          string
	LeavePluginRunning bool
	NoDeviceManager    bool
	NoContainerRecords bool
	// PluginPodNamespace and PluginPodLabels: see PluginPod (empty: no pod).
	PluginPodNamespace string
	PluginPodLabels    string
	// PluginRestartDelay: see PluginCommand.RestartDelay.
	PluginRestartDelay time.Duration
	// PluginStandby runs a second plugin process beside the first, as the
	// chart's DaemonSet pod runs a standby container: see Config.Standby.
	PluginStandby bool
	// StatusInterval: see Config.StatusInterval.
	StatusInterval time.Duration
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node", os.Getenv("NODE_NAME"), "name of the Node to play the kubelet for (env NODE_NAME)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (env KUBECONFIG)")
	fs.StringVar(&o.StateDir, "state-dir", "", "this node's directory: device-plugins/, pod-resources/, plugin.pid, plugin.log (default /tmp/gpushare-nodes/NODE)")
	fs.StringVar(&o.Labels, "labels", "", "labels for the Node when the agent creates it: k=v,k2=v2")
	fs.StringVar(&o.PluginPath, "plugin", "", "device plugin binary to run beside the device manager; its arguments follow \"--\"")
	fs.StringVar(&o.PluginEnv, "plugin-env", "", "extra environment for the plugin: K=V,K2=V2 (NODE_NAME and KUBECONFIG are set)")
	fs.BoolVar(&o.LeavePluginRunning, "leave-plugin-running", false, "do not stop the plugin when the agent stops (the next agent adopts it)")
	fs.StringVar(&o.PluginPodNamespace, "plugin-pod-namespace", "", "keep a pod for the plugin in this namespace, Ready while the plugin serves (as the chart's DaemonSet pod); empty: none")
	fs.StringVar(&o.PluginPodLabels, "plugin-pod-labels", "app.kubernetes.io/component=device-plugin", "labels of the plugin's pod: k=v,k2=v2")
	fs.DurationVar(&o.PluginRestartDelay, "plugin-restart-delay", time.Second, "pause before restarting a plugin that exited (the kubelet restarts a crashed container at once the first time, then after 10 s, 20 s, ...)")
	fs.BoolVar(&o.PluginStandby, "plugin-standby", false, "run a standby plugin process beside the plugin, as the chart's pod does: both get --instance (the plugin pod's name, and it with -standby) and --node-lock-file (node-agent.lock in the state directory), the standby logs to plugin-standby.log and its PID is in plugin-standby.pid")
	fs.DurationVar(&o.StatusInterval, "node-status-update-frequency", 0, "how often a change in device capacity is posted to the Node (the kubelet's nodeStatusUpdateFrequency is 10s); 0: within the 1 s resync")
	fs.BoolVar(&o.NoDeviceManager, "no-device-manager", false, "run without the kubelet device manager (no root, no devices)")
	fs.BoolVar(&o.NoContainerRecords, "no-container-records", false, "do not record each container's run options on its pod (a write per pod a kubelet does not make; the end-to-end tests read them)")
}

// Complete fills defaults and checks the options.
func (o *Options) Complete(args []string) error {
	o.PluginArgs = args
	if o.NodeName == "" {
		return errors.New("--node (or NODE_NAME) is required")
	}
	if o.Kubeconfig == "" {
		return errors.New("--kubeconfig (or KUBECONFIG) is required")
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(os.TempDir(), "gpushare-nodes", o.NodeName)
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	o.StateDir = abs
	if len(args) > 0 && o.PluginPath == "" {
		return fmt.Errorf("plugin arguments %q given without --plugin", args)
	}
	if o.PluginPath != "" && o.NoDeviceManager {
		return errors.New("--plugin needs the device manager: drop --no-device-manager")
	}
	return os.MkdirAll(o.StateDir, 0o755)
}

// GPUProcessesFileName is the simulated NVML's process file in the node's
// state directory; pass it to the plugin as --nvml-sim-processes.
const GPUProcessesFileName = "gpu-processes.json"

// NodeLockFileName and StandbyPIDFileName are, in the node's state
// directory, the node lock both plugin processes of --plugin-standby take
// and the standby's PID file.
const (
	NodeLockFileName   = "node-agent.lock"
	StandbyPIDFileName = "plugin-standby.pid"
)

// Config builds the agent's configuration from the options.
func (o *Options) Config() (Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return Config{}, fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
	}
	// The kubelet's API budget (kubeAPIQPS 50, kubeAPIBurst 100), not
	// client-go's default of 5: the agent writes up to two requests per pod it
	// starts, and would otherwise pace a burst at a few pods per second.
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Config{}, fmt.Errorf("API client: %w", err)
	}
	labels, err := splitPairs(o.Labels)
	if err != nil {
		return Config{}, fmt.Errorf("--labels: %w", err)
	}
	cfg := Config{NodeName: o.NodeName, Client: client, Labels: labels, GPUProcessesFile: filepath.Join(o.StateDir, GPUProcessesFileName), StatusInterval: o.StatusInterval, NoContainerRecords: o.NoContainerRecords}
	if !o.NoDeviceManager {
		cfg.StartDeviceManager = StartKubeletDeviceManager
		cfg.PodResourcesSocket = PodResourcesSocket
	}
	if o.PluginPath != "" {
		env, err := splitPairs(o.PluginEnv)
		if err != nil {
			return Config{}, fmt.Errorf("--plugin-env: %w", err)
		}
		p := &PluginCommand{
			Path: o.PluginPath, Args: o.PluginArgs,
			Env:          []string{"KUBECONFIG=" + o.Kubeconfig},
			LogFile:      filepath.Join(o.StateDir, "plugin.log"),
			PIDFile:      filepath.Join(o.StateDir, "plugin.pid"),
			LeaveRunning: o.LeavePluginRunning,
			RestartDelay: o.PluginRestartDelay,
		}
		for k, v := range env {
			p.Env = append(p.Env, k+"="+v)
		}
		if p.Path, err = filepath.Abs(p.Path); err != nil {
			return Config{}, fmt.Errorf("--plugin: %w", err)
		}
		cfg.Plugin = p
		if o.PluginStandby {
			lock := "--node-lock-file=" + filepath.Join(o.StateDir, NodeLockFileName)
			standby := *p
			standby.Args = append(append([]string(nil), p.Args...), "--instance="+pluginPodName(o.NodeName)+"-standby", lock)
			standby.LogFile = filepath.Join(o.StateDir, "plugin-standby.log")
			standby.PIDFile = filepath.Join(o.StateDir, StandbyPIDFileName)
			p.Args = append(append([]string(nil), p.Args...), "--instance="+pluginPodName(o.NodeName), lock)
			cfg.Standby = &standby
		}
		if o.PluginPodNamespace != "" {
			labels, err := splitPairs(o.PluginPodLabels)
			if err != nil {
				return Config{}, fmt.Errorf("--plugin-pod-labels: %w", err)
			}
			cfg.PluginPod = &PluginPod{Namespace: o.PluginPodNamespace, Labels: labels}
		}
	}
	return cfg, nil
}

// Run sets up the mount namespace's kubelet directory (unless the device
// manager is off) and runs the agent until ctx ends.
func (o *Options) Run(ctx context.Context) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	if cfg.StartDeviceManager != nil {
		if err := SetupKubeletDir(o.StateDir); err != nil {
			return err
		}
	}
	agent, err := New(cfg)
	if err != nil {
		return err
	}
	return agent.Run(ctx)
}

func splitPairs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}
