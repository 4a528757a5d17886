// Package app wires the device plugin together: it owns the program's
// command (NewCommand, started the one way internal/cli describes), the
// command-line options (each also settable by an environment variable, for
// the DaemonSet) and Run, which builds the card state from NVML, publishes it on
// the Node, keeps health and isolation current and serves the kubelet.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/health"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/isolation"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/plugin"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/internal/recordkey"
)

// Options are the plugin's settings; docs/deviceplugin.md lists them.
type Options struct {
	NodeName   string
	Kubeconfig string
	// NodeKubeconfig, when set, is the node's own identity (the kubelet's
	// kubeconfig): the node's pods and Node are read with it (Clients).
	NodeKubeconfig string
	// KubeAPIQPS and KubeAPIBurst are the plugin's API request budget (the
	// kubelet's defaults): each Allocate writes a record before it returns,
	// so a budget below the node's admission rate slows every GPU pod.
	KubeAPIQPS            float64
	KubeAPIBurst          int
	NVML                  string
	FailOnInitError       bool
	MemoryUnit            string
	DeviceListStrategy    string
	DeviceIDStrategy      string
	HealthChecks          bool
	HealthRecheckInterval time.Duration
	IgnoreXIDs            string
	IsolationFile         string
	// RecordKeyDir, when set, holds the key records are signed with
	// (api.LoadRecordKeys): only signed records give a card. It is read
	// again every RecordKeyInterval (internal/recordkey).
	RecordKeyDir      string
	RecordKeyInterval time.Duration
	// NodeKeyFile keeps the node's record key across restarts (empty: memory).
	NodeKeyFile     string
	DevicePluginDir string
	// Instance, when set, names this plugin process's sockets (SocketNames),
	// so that a new plugin registers beside the old one during a rolling
	// update instead of replacing its socket.
	Instance string
	// NodeLockFile, when set, is the file every plugin of the node locks: only its holder does
	// the node's duties (runNodeDuties), so a standby can serve the kubelet beside it.
	NodeLockFile       string
	PodResourcesSocket string
	// WholeCards registers the whole-card resource (api.Names.WholeResourceName)
	// beside gpu-mem.
	WholeCards        bool
	AllocateWait      time.Duration
	ReconcileInterval time.Duration
	Memory            MemoryOptions // memory.go
	DRA               DRAOptions    // dra.go
	// Names are the resource names and the annotation domain (--domain,
	// --resource-name, --whole-resource-name), the same in every program.
	Names cli.NameFlags
}

// EnvName is the environment variable that sets a flag: GPUSHARE_ and the
// flag's name in upper case with '_' for '-' (--memory-unit:
// GPUSHARE_MEMORY_UNIT). --node-name is also set by NODE_NAME and
// --kubeconfig by KUBECONFIG.
func EnvName(flagName string) string {
	switch flagName {
	case "node-name":
		return "NODE_NAME"
	case "kubeconfig":
		return "KUBECONFIG"
	}
	return "GPUSHARE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// AddFlags registers the options on fs with their defaults, and klog's flags
// (-v, …), each bound to its environment variable (EnvName).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", "", "the Node this plugin runs on (required; the DaemonSet sets NODE_NAME from fieldRef spec.nodeName)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&o.NodeKubeconfig, "node-kubeconfig", "", "the node's own kubeconfig (the kubelet's, e.g. /etc/kubernetes/kubelet.conf; it must authenticate as system:node:NODE): the plugin reads its node's pods and Node with it, which the API server's Node authorizer allows for this node only, and makes its writes with --kubeconfig's identity; empty: --kubeconfig's identity reads too")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", 50, "requests per second to the API server (the kubelet's default); each Allocate writes its pod's record before it returns")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 100, "request burst to the API server (the kubelet's default)")
	fs.StringVar(&o.NVML, "nvml", "real", "GPU source: real (the host's NVML), mock:dgxa100|dgxh100|dgxh200|dgxb200, or spec:COUNTxSIZE[:MODEL],... e.g. spec:4x80GiB:NVIDIA-H100,2x40GiB:NVIDIA-A100")
	fs.BoolVar(&o.FailOnInitError, "fail-on-init-error", true, "exit when NVML is unavailable (no driver, no GPU); false: log why and wait, advertising nothing")
	fs.StringVar(&o.MemoryUnit, "memory-unit", string(api.UnitGiB), "unit of --resource-name: GiB or MiB")
	fs.StringVar(&o.DeviceListStrategy, "device-list-strategy", string(plugin.StrategyVolumeMounts), "how the container is told its card: volume-mounts or envvar")
	fs.StringVar(&o.DeviceIDStrategy, "device-id-strategy", string(plugin.DeviceIDUUID), "how the card is named in the container: uuid or index")
	fs.BoolVar(&o.HealthChecks, "health-checks", true, "watch NVML critical XID events and mark failing cards unhealthy")
	fs.DurationVar(&o.HealthRecheckInterval, "health-recheck-interval", 5*time.Minute, "a card unhealthy after an XID comes back once it has had no critical XID for this long and answers NVML (0: never)")
	fs.StringVar(&o.IgnoreXIDs, "ignore-xids", "", "comma-separated XIDs to ignore in addition to the application XIDs 13,31,43,45,68,109")
	fs.StringVar(&o.RecordKeyDir, "record-key-dir", "", "directory with the public halves ('current', optional 'previous') of the keys the extender signs assignment records with, as the extender publishes them in a ConfigMap; set, only signed records give a container a card, and the plugin waits for the keys before it offers GPU memory (empty: records are not checked)")
	fs.StringVar(&o.NodeKeyFile, "node-key-file", "", "file keeping this node's record key (the key its corrections of records are signed with) across plugin restarts, made when missing; the chart keeps it on the host (/var/lib/gpushare). Empty: a new key at each start, and the records the previous plugin signed are rewritten from the kubelet's account")
	fs.DurationVar(&o.RecordKeyInterval, "record-key-interval", recordkey.DefaultInterval, "how often --record-key-dir is read again, so that a rotated key takes effect without a restart")
	fs.StringVar(&o.IsolationFile, "isolation-file", "", `file of isolated cards {"index":[...],"uuid":[...]}, watched for changes (empty: none)`)
	fs.StringVar(&o.DevicePluginDir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	fs.StringVar(&o.Instance, "instance", "", "a name unique to this plugin process on its node (the chart passes the pod's name): its sockets are then gpushare-<hash>.sock and gpushare-whole-<hash>.sock, so that during a rolling update the new plugin registers beside the old one and the kubelet (1.37+) hands over without marking the devices unhealthy; empty: gpushare.sock and gpushare-whole.sock")
	fs.StringVar(&o.NodeLockFile, "node-lock-file", "", "a file on the node (the chart: /var/lib/gpushare/node-agent.lock) that every plugin of the node locks; only the holder publishes the inventory and samples and enforces memory, while every plugin serves the kubelet, so a standby plugin (--instance of its own) keeps the node's GPU devices healthy in the kubelet while the other restarts and takes the duties over when it exits; empty: this plugin does them at once")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources API socket, to reconcile records with what the kubelet allocated (empty: not used)")
	fs.BoolVar(&o.WholeCards, "whole-cards", true, "also offer the cards whole, as --whole-resource-name (one device per card, exclusive with --resource-name; its own registration with the kubelet)")
	fs.DurationVar(&o.AllocateWait, "allocate-wait", 10*time.Second, "how long Allocate and GetPreferredAllocation wait for a pod the kubelet knows to reach the plugin's pod cache")
	fs.DurationVar(&o.ReconcileInterval, "reconcile-interval", 10*time.Second, "how often assignment records are reconciled with the kubelet's PodResources")
	o.Memory.addFlags(fs)
	o.DRA.addFlags(fs)
	o.Names.AddFlags(fs)
	cli.AddKlogFlags(fs)
	cli.BindEnv(fs, EnvName)
}

// NewCommand returns the gpushare-device-plugin command: flags (AddFlags),
// each also set by its environment variable read through lookupEnv
// (os.LookupEnv in main; the command line wins), then Run with a client for
// --kubeconfig (empty: in-cluster) until the command's context ends. restart
// receives SIGHUP (main owns the signal handler).
func NewCommand(lookupEnv func(string) (string, bool), restart <-chan os.Signal) *cobra.Command {
	return newCommand(&Options{Names: cli.DefaultNameFlags()}, lookupEnv, func(ctx context.Context, o Options) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return fmt.Errorf("kubernetes client configuration: %w", err)
		}
		cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
		clients := Clients{}
		if clients.Write, err = kubernetes.NewForConfig(cfg); err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if o.NodeKubeconfig != "" {
			ncfg, err := clientcmd.BuildConfigFromFlags("", o.NodeKubeconfig)
			if err != nil {
				return fmt.Errorf("--node-kubeconfig: %w", err)
			}
			ncfg.QPS, ncfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
			if clients.Read, err = kubernetes.NewForConfig(ncfg); err != nil {
				return fmt.Errorf("--node-kubeconfig: %w", err)
			}
		}
		return Run(ctx, o, clients, restart)
	})
}

// newCommand is NewCommand with the options and what runs them injected.
func newCommand(o *Options, lookupEnv func(string) (string, bool), run func(context.Context, Options) error) *cobra.Command {
	long := `gpushare-device-plugin advertises GPU memory as units of --resource-name (default
` + string(api.DefaultResourceName) + `) and whole cards as --whole-resource-name (default ` + string(api.DefaultWholeResourceName) + `), gives
each container the card the gpushare scheduler extender assigned, and publishes the node's GPU
inventory under --domain (default ` + api.DefaultDomain + `; docs/deviceplugin.md). Every gpushare program of a
cluster must be given the same three names. It does not register on a node where another GPU
device plugin already advertises NVIDIA GPUs (docs/install.md).`
	cmd := cli.Command("gpushare-device-plugin", "gpushare's kubelet device plugin: GPU memory as extended-resource units", long, lookupEnv, func(cmd *cobra.Command) error {
		// Checked before the client is built, so that a missing
		// NODE_NAME is reported as such outside a cluster too.
		if err := o.Validate(); err != nil {
			return err
		}
		return run(klog.NewContext(cmd.Context(), klog.Background()), *o)
	})
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o Options) ignoredXIDs() ([]uint64, error) {
	out := append([]uint64(nil), nvml.DefaultIgnoredXIDs...)
	for _, s := range strings.Split(o.IgnoreXIDs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		x, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--ignore-xids: %q is not an XID number", s)
		}
		out = append(out, x)
	}
	return out, nil
}

// ErrNoNodeName: NODE_NAME (--node-name) is missing.
var ErrNoNodeName = errors.New("the node name is required: set NODE_NAME from the downward API (env: valueFrom: fieldRef: fieldPath: spec.nodeName) or pass --node-name")

// Validate checks the options that need no cluster and no GPU, the one
// place their rules live (Run calls it too, for callers that skip the
// command). Its errors are usage errors (cli.ErrUsage: exit status 2).
func (o Options) Validate() error {
	return cli.Usage(o.validate())
}

func (o Options) validate() error {
	if o.NodeName == "" {
		return ErrNoNodeName
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		return fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d must be positive", o.KubeAPIQPS, o.KubeAPIBurst)
	}
	if _, err := api.ParseMemoryUnit(o.MemoryUnit); err != nil {
		return fmt.Errorf("--memory-unit: %w", err)
	}
	if _, err := o.Names.Names(); err != nil {
		return err
	}
	if _, err := plugin.ParseStrategy(o.DeviceListStrategy); err != nil {
		return fmt.Errorf("--device-list-strategy: %w", err)
	}
	if _, err := plugin.ParseDeviceIDStrategy(o.DeviceIDStrategy); err != nil {
		return fmt.Errorf("--device-id-strategy: %w", err)
	}
	if _, err := nvml.ParseSource(o.NVML); err != nil {
		return err
	}
	if _, err := o.ignoredXIDs(); err != nil {
		return err
	}
	if o.RecordKeyDir != "" {
		if _, err := os.Stat(o.RecordKeyDir); err != nil {
			return fmt.Errorf("--record-key-dir: %w", err)
		}
	}
	if o.NodeKubeconfig != "" {
		if _, err := os.Stat(o.NodeKubeconfig); err != nil {
			return fmt.Errorf("--node-kubeconfig: %w", err)
		}
	}
	return o.Memory.validate()
}

// Run runs the plugin until ctx is done. clients reach the API server;
// restart receives SIGHUP.
func Run(ctx context.Context, o Options, clients Clients, restart <-chan os.Signal) error {
	log := klog.FromContext(ctx)
	if err := o.Validate(); err != nil {
		return err
	}
	client := clients.Write
	unit, err := api.ParseMemoryUnit(o.MemoryUnit)
	if err != nil {
		return fmt.Errorf("--memory-unit: %w", err)
	}
	strategy, err := plugin.ParseStrategy(o.DeviceListStrategy)
	if err != nil {
		return fmt.Errorf("--device-list-strategy: %w", err)
	}
	idStrategy, err := plugin.ParseDeviceIDStrategy(o.DeviceIDStrategy)
	if err != nil {
		return fmt.Errorf("--device-id-strategy: %w", err)
	}
	src, err := nvml.ParseSource(o.NVML)
	if err != nil {
		return err
	}
	names, err := o.Names.Names()
	if err != nil {
		return err
	}
	ignored, err := o.ignoredXIDs()
	if err != nil {
		return err
	}
	gpus, sim, err := nvml.OpenSource(src, o.NodeName, nvml.Options{IgnoredXIDs: ignored})
	if err != nil {
		if o.FailOnInitError {
			return fmt.Errorf("%w (--fail-on-init-error=false waits instead of exiting)", err)
		}
		log.Error(err, "No GPU: waiting, advertising nothing (--fail-on-init-error=false)")
		<-ctx.Done()
		return nil
	}
	defer gpus.Shutdown()
	cards, err := gpus.Cards()
	if err != nil {
		return err
	}
	if err := inventory.CheckMessageSize(unit, cards); err != nil {
		return err
	}
	store, err := inventory.New(unit, cards)
	if err != nil {
		return err
	}
	for _, c := range cards {
		log.Info("GPU found", "index", c.Index, "uuid", c.UUID, "model", c.Model, "memoryMiB", c.MemoryMiB, "units", unit.UnitsFromMiB(c.MemoryMiB), "unit", unit)
	}

	reader, err := readClient(ctx, clients, o.NodeName)
	if err != nil {
		return err
	}
	cl := cluster.New(client, o.NodeName, cluster.WithNames(names), cluster.WithReader(reader))
	if err := cl.CheckNode(ctx); err != nil {
		return err
	}
	if !o.DRA.Enabled {
		if free, err := waitForNoOtherPlugin(ctx, reader, client, o.NodeName, names, otherPluginPoll, log); !free || err != nil {
			return err
		}
	}
	var uuids []string
	for _, c := range cards {
		uuids = append(uuids, c.UUID)
	}
	cl.OnIsolation(func(iso api.Isolation, err error) {
		if err != nil {
			log.Error(err, "Malformed isolation annotation: every card of the node is isolated until it is fixed (the scheduler extender filters the node meanwhile)", "annotation", names.AnnotationIsolation())
		}
		iso = isolation.InForce(iso, err, uuids)
		if store.SetIsolation(inventory.SourceAnnotation, iso) {
			log.Info("Isolation changed", "source", "annotation", "isolated", iso.String())
		}
	})
	if err := cl.Start(ctx); err != nil {
		return err
	}
	logNameMismatches(ctx, cl, names, log)
	if o.IsolationFile != "" {
		if _, err := isolation.Read(o.IsolationFile); err != nil {
			return fmt.Errorf("--isolation-file %s: %w", o.IsolationFile, err)
		}
		go func() {
			err := isolation.WatchFile(ctx, o.IsolationFile, func(iso api.Isolation, err error) {
				if err != nil {
					log.Error(err, "Isolation file unreadable or malformed: every card of the node is isolated until it is fixed", "file", o.IsolationFile)
				}
				iso = isolation.InForce(iso, err, uuids)
				if store.SetIsolation(inventory.SourceFile, iso) {
					log.Info("Isolation changed", "source", o.IsolationFile, "isolated", iso.String())
				}
			})
			if err != nil {
				log.Error(err, "Not watching the isolation file", "file", o.IsolationFile)
			}
		}()
	}
	if o.HealthChecks {
		go health.New(gpus, store, clock.RealClock{}, o.HealthRecheckInterval, log).Run(ctx)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	keys, recordKey, err := recordKeys(ctx, o, reg, log)
	if err != nil {
		return err
	}
	grant := plugin.Config{Names: names, Strategy: strategy, DeviceIDStrategy: idStrategy, MPS: o.Memory.mps()}
	if o.DRA.Enabled {
		return runDRA(ctx, o, names, nodeGPUs{gpus, sim}, store, cl, grant, keys, client, reg)
	}

	nodeReg := prometheus.WrapRegistererWith(prometheus.Labels{"node": o.NodeName}, reg)
	metrics, err := plugin.NewMetrics(nodeReg)
	if err != nil {
		return err
	}
	var podres, wholePodres plugin.PodResources
	if o.PodResourcesSocket != "" {
		podres = plugin.NewKubeletPodResources(o.PodResourcesSocket, string(names.ResourceName()), cl.Arrival, metrics.ObservePodResourcesGets(string(names.ResourceName())))
		wholePodres = plugin.NewKubeletPodResources(o.PodResourcesSocket, string(names.WholeResourceName()), cl.Arrival, metrics.ObservePodResourcesGets(string(names.WholeResourceName())))
	}
	gauge, err := newDutiesGauge(nodeReg)
	if err != nil {
		return err
	}
	socket, wholeSocket := SocketNames(o.Instance)
	p := plugin.New(plugin.Config{
		Names:             names,
		Metrics:           metrics,
		PluginDir:         o.DevicePluginDir,
		SocketName:        socket,
		WholeSocketName:   wholeSocket,
		Strategy:          strategy,
		DeviceIDStrategy:  idStrategy,
		AllocateWait:      o.AllocateWait,
		ReconcileInterval: o.ReconcileInterval,
		RecordKeys:        keys,
		MPS:               o.Memory.mps(),
		WholeCards:        o.WholeCards,
		WholePodResources: wholePodres,
	}, store, cl, podres, log)
	memory, err := startMemory(ctx, o, names, nodeGPUs{gpus, sim}, store, cl, podres, nil, keys, client, reg, pluginReadiness(p.Serving))
	if err != nil {
		return err
	}
	publish := func(ctx context.Context) { Publish(ctx, cl, store, recordKey, log) }
	go runNodeDuties(ctx, o.NodeLockFile, gauge, log, publish, memory)
	return p.Run(ctx, restart)
}

// recordKeys waits for the extender's record keys when --record-key-dir is set and returns the
// keyring records are checked with (the node's own key included) and the node's public key for
// its annotation; without --record-key-dir, none (every record is read).
func recordKeys(ctx context.Context, o Options, reg prometheus.Registerer, log klog.Logger) (api.RecordKeyring, string, error) {
	if o.RecordKeyDir != "" {
		if err := recordkey.Wait(ctx, o.RecordKeyDir, o.RecordKeyInterval, log.WithName("record-key")); err != nil {
			return nil, "", err
		}
	}
	extenderKeys, err := recordkey.Start(ctx, o.RecordKeyDir, o.RecordKeyInterval, log.WithName("record-key"), prometheus.WrapRegistererWith(prometheus.Labels{"node": o.NodeName}, reg))
	if err != nil || extenderKeys == nil {
		return nil, "", err
	}
	ring, err := recordkey.NewNodeRing(extenderKeys, o.NodeName, o.NodeKeyFile)
	if err != nil {
		return nil, "", err
	}
	return ring, api.NodeKeyAnnotation(ring.Public()), nil
}

// Publish writes the store's inventory on the Node now and after every
// change, retrying failures with a growing delay (up to 30s).
func Publish(ctx context.Context, cl *cluster.Cluster, store *inventory.Store, recordKey string, log klog.Logger) {
	delay := time.Second
	for {
		changed := store.InventoryChanged()
		inv := store.Inventory()
		if err := cl.Publish(ctx, inv, recordKey); err != nil {
			log.Error(err, "Publishing the GPU inventory failed; retrying", "in", delay)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(2*delay, 30*time.Second)
			continue
		}
		delay = time.Second
		log.V(1).Info("GPU inventory published", "node", cl.Node(), "cards", len(inv.Cards))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
