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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/cluster"
	"github.com/gpushare/gpushare/deviceplugin/dra"
	"github.com/gpushare/gpushare/deviceplugin/health"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/isolation"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/plugin"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/response"
	"github.com/gpushare/gpushare/deviceplugin/usage"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/internal/recordkey"
)

// Kind is the kind of the plugin's configuration file (cli.LoadConfig).
const Kind = "DevicePluginConfiguration"

// Options are the plugin's settings: the fields without a JSON name are its flags, set per run;
// the others are its configuration file (--config, kind Kind; docs/reference/device-plugin-config.md
// is generated from these comments). DefaultOptions holds the defaults.
type Options struct {
	metav1.TypeMeta `json:",inline"`
	ConfigFile      string `json:"-"`
	NodeName        string `json:"-"`
	Kubeconfig      string `json:"-"`
	// NodeKubeconfig, when set, is the node's own identity (the kubelet's
	// kubeconfig): the node's pods and Node are read with it (Clients).
	NodeKubeconfig  string `json:"-"`
	NVML            string `json:"-"`
	DevicePluginDir string `json:"-"`
	// Instance, when set, names this plugin process's sockets (SocketNames),
	// so that a new plugin registers beside the old one during a rolling
	// update instead of replacing its socket.
	Instance string `json:"-"`
	// NodeLockFile, when set, is the file every plugin of the node locks: only its holder does
	// the node's duties (runNodeDuties), so a standby can serve the kubelet beside it.
	NodeLockFile       string `json:"-"`
	PodResourcesSocket string `json:"-"`

	// Names are the resource names and the annotation domain, the same in every program.
	Names cli.NameFlags `json:"names"`
	// KubeAPIQPS is the plugin's API request budget per second (the kubelet's default): each
	// Allocate writes a record before it returns, so a budget below the node's admission rate
	// slows every GPU pod.
	KubeAPIQPS float64 `json:"kubeAPIQPS"`
	// KubeAPIBurst is the burst of that budget.
	KubeAPIBurst int `json:"kubeAPIBurst"`
	// FailOnInitError exits when NVML is unavailable (no driver, no GPU); false: log why and
	// wait, advertising nothing.
	FailOnInitError bool `json:"failOnInitError"`
	// MemoryUnit is the unit of names.resourceName: GiB or MiB.
	MemoryUnit string `json:"memoryUnit"`
	// DeviceListStrategy is how the container is told its card: volume-mounts or envvar.
	DeviceListStrategy string `json:"deviceListStrategy"`
	// DeviceIDStrategy is how the card is named in the container: uuid or index.
	DeviceIDStrategy string `json:"deviceIDStrategy"`
	// HealthChecks watches NVML's critical XID events and marks failing cards unhealthy.
	HealthChecks bool `json:"healthChecks"`
	// HealthRecheckInterval: a card unhealthy after an XID comes back once it has had no
	// critical XID for this long and answers NVML (0: never).
	HealthRecheckInterval time.Duration `json:"healthRecheckInterval"`
	// IgnoreXIDs are comma-separated XIDs ignored besides the application XIDs
	// 13,31,43,45,68,109.
	IgnoreXIDs string `json:"ignoreXIDs"`
	// IsolationFile is a file of isolated cards {"index":[...],"uuid":[...]}, watched for
	// changes (empty: none).
	IsolationFile string `json:"isolationFile"`
	// RecordKeyDir holds the public halves ('current', optional 'previous') of the keys the
	// extender signs records with, as it publishes them in a ConfigMap: only signed records
	// give a container a card, and the plugin waits for the keys before it offers GPU memory
	// (empty: records are not checked).
	RecordKeyDir string `json:"recordKeyDir"`
	// RecordKeyInterval is how often recordKeyDir is read again, so that a rotated key takes
	// effect without a restart.
	RecordKeyInterval time.Duration `json:"recordKeyInterval"`
	// NodeKeyFile keeps this node's record key (which signs its corrections of records)
	// across restarts, made when missing. Empty: a new key at each start.
	NodeKeyFile string `json:"nodeKeyFile"`
	// WholeCards also offers the cards whole, as names.wholeResourceName (one device per
	// card, exclusive with names.resourceName).
	WholeCards bool `json:"wholeCards"`
	// AllocateWait is how long Allocate waits for a pod the kubelet knows to reach the
	// plugin's pod cache.
	AllocateWait time.Duration `json:"allocateWait"`
	// ReconcileInterval is how often records are reconciled with the kubelet's PodResources.
	ReconcileInterval time.Duration `json:"reconcileInterval"`
	// AdminAuth guards /metrics.
	AdminAuth adminauth.Options `json:"adminAuth"`
	Memory    MemoryOptions     `json:"memory"` // memory.go
	DRA       DRAOptions        `json:"dra"`    // dra.go
}

// DefaultOptions are the defaults of the flags and of the configuration file.
func DefaultOptions() Options {
	return Options{
		NVML: "real", DevicePluginDir: pluginapi.DevicePluginPath, PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		Names: cli.DefaultNameFlags(), KubeAPIQPS: 50, KubeAPIBurst: 100, FailOnInitError: true,
		MemoryUnit: string(api.UnitGiB), DeviceListStrategy: string(response.StrategyVolumeMounts), DeviceIDStrategy: string(response.DeviceIDUUID),
		HealthChecks: true, HealthRecheckInterval: 5 * time.Minute, RecordKeyInterval: recordkey.DefaultInterval,
		WholeCards: true, AllocateWait: 10 * time.Second, ReconcileInterval: 10 * time.Second, AdminAuth: adminauth.DefaultOptions(),
		Memory: MemoryOptions{SampleInterval: 5 * time.Second, Enforcement: string(usage.DefaultMode), Tolerance: "5%", Grace: 30 * time.Second,
			EvictGrace: 30 * time.Second, ProcRoot: "/proc", MPSPipeDir: "/run/nvidia/mps", MPSShmDir: "/run/nvidia/mps/shm"},
		DRA: DRAOptions{CDIDir: dra.DefaultCDIDir, RegistryDir: dra.KubeletRegistryDir},
	}
}

// deprecatedFlags set configuration fields (cli.Aliases).
var deprecatedFlags = []cli.Alias{
	{Flag: cli.FlagDomain, Field: "names.domain"}, {Flag: cli.FlagResourceName, Field: "names.resourceName"},
	{Flag: cli.FlagWholeResourceName, Field: "names.wholeResourceName"},
	{Flag: "kube-api-qps", Field: "kubeAPIQPS"}, {Flag: "kube-api-burst", Field: "kubeAPIBurst"},
	{Flag: "fail-on-init-error", Field: "failOnInitError"}, {Flag: "memory-unit", Field: "memoryUnit"},
	{Flag: "device-list-strategy", Field: "deviceListStrategy"}, {Flag: "device-id-strategy", Field: "deviceIDStrategy"},
	{Flag: "health-checks", Field: "healthChecks"}, {Flag: "health-recheck-interval", Field: "healthRecheckInterval"},
	{Flag: "ignore-xids", Field: "ignoreXIDs"}, {Flag: "isolation-file", Field: "isolationFile"},
	{Flag: "record-key-dir", Field: "recordKeyDir"}, {Flag: "record-key-interval", Field: "recordKeyInterval"},
	{Flag: "node-key-file", Field: "nodeKeyFile"}, {Flag: "whole-cards", Field: "wholeCards"},
	{Flag: "allocate-wait", Field: "allocateWait"}, {Flag: "reconcile-interval", Field: "reconcileInterval"},
	{Flag: "admin-auth", Field: "adminAuth.mode"}, {Flag: "admin-token-file", Field: "adminAuth.tokenFile"},
	{Flag: "memory-sample-interval", Field: "memory.sampleInterval"}, {Flag: "memory-enforcement", Field: "memory.enforcement"},
	{Flag: "memory-tolerance", Field: "memory.tolerance"}, {Flag: "memory-grace", Field: "memory.grace"},
	{Flag: "memory-evict-grace", Field: "memory.evictGrace"}, {Flag: "proc-root", Field: "memory.procRoot"},
	{Flag: "mps", Field: "memory.mps"}, {Flag: "mps-pipe-dir", Field: "memory.mpsPipeDir"}, {Flag: "mps-shm-dir", Field: "memory.mpsShmDir"},
	{Flag: "dra-cdi-dir", Field: "dra.cdiDir"}, {Flag: "dra-nvidia-cdi-kind", Field: "dra.nvidiaCDIKind"},
}

// EnvName is the environment variable that sets a flag: GPUSHARE_ and the
// flag's name in upper case with '_' for '-' (--nvml: GPUSHARE_NVML).
// --node-name is also set by NODE_NAME and --kubeconfig by KUBECONFIG.
func EnvName(flagName string) string {
	switch flagName {
	case "node-name":
		return "NODE_NAME"
	case "kubeconfig":
		return "KUBECONFIG"
	}
	return "GPUSHARE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// AddFlags registers the per-run flags on fs with o's values as defaults, the deprecated flags
// of configuration fields and klog's flags (-v, …), each bound to its environment variable
// (EnvName).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, cli.FlagConfig, o.ConfigFile, "configuration file, kind "+Kind+" (docs/reference/device-plugin-config.md); empty: the defaults")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the Node this plugin runs on (required; the DaemonSet sets NODE_NAME from fieldRef spec.nodeName)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&o.NodeKubeconfig, "node-kubeconfig", o.NodeKubeconfig, "the node's own kubeconfig (the kubelet's, e.g. /etc/kubernetes/kubelet.conf; it must authenticate as system:node:NODE): the plugin reads its node's pods and Node with it, and writes with --kubeconfig's identity; empty: --kubeconfig's identity reads too")
	fs.StringVar(&o.NVML, "nvml", o.NVML, "GPU source: real (the host's NVML), mock:dgxa100|dgxh100|dgxh200|dgxb200, or spec:COUNTxSIZE[:MODEL],... e.g. spec:4x80GiB:NVIDIA-H100")
	fs.StringVar(&o.Memory.SimProcesses, "nvml-sim-processes", o.Memory.SimProcesses, "with a simulated --nvml: JSON file of the processes each card reports, {\"0\":[{\"pid\":4242,\"usedMiB\":3072}]}")
	fs.StringVar(&o.DevicePluginDir, "device-plugin-dir", o.DevicePluginDir, "the kubelet's device-plugin directory")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", o.PodResourcesSocket, "the kubelet's PodResources API socket (empty: not used)")
	fs.StringVar(&o.Instance, "instance", o.Instance, "a name unique to this plugin process on its node (the chart passes the pod's name): its sockets are then named after it, so that a new plugin registers beside the old one; empty: gpushare.sock and gpushare-whole.sock")
	fs.StringVar(&o.NodeLockFile, "node-lock-file", o.NodeLockFile, "a file every plugin of the node locks: only the holder publishes the inventory and samples and enforces memory, while every plugin serves the kubelet (a standby); empty: this plugin does them at once")
	fs.StringVar(&o.Memory.MetricsAddress, "metrics-address", o.Memory.MetricsAddress, "address of /metrics and /readyz, e.g. :9402; empty: none")
	fs.BoolVar(&o.DRA.Enabled, "dra", o.DRA.Enabled, "serve the cards through Dynamic Resource Allocation instead of as device-plugin resources (docs/dra.md)")
	fs.StringVar(&o.DRA.RegistryDir, "dra-registry-dir", o.DRA.RegistryDir, "with --dra, the kubelet's plugin registration directory")
	fs.StringVar(&o.DRA.PluginDir, "dra-plugin-dir", o.DRA.PluginDir, "with --dra, the directory of the driver's socket (empty: /var/lib/kubelet/plugins/<driver>)")
	cli.Aliases(fs, o, deprecatedFlags)
	cli.AddKlogFlags(fs)
	cli.BindEnv(fs, EnvName)
}

// NewCommand returns the gpushare-device-plugin command: flags (AddFlags),
// each also set by its environment variable read through lookupEnv
// (os.LookupEnv in main; the command line wins), then Run with a client for
// --kubeconfig (empty: in-cluster) until the command's context ends. restart
// receives SIGHUP (main owns the signal handler).
func NewCommand(lookupEnv func(string) (string, bool), restart <-chan os.Signal) *cobra.Command {
	o := DefaultOptions()
	return newCommand(&o, lookupEnv, func(ctx context.Context, o Options) error {
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
	long := `gpushare-device-plugin advertises GPU memory as units of one extended resource (default
` + string(api.DefaultResourceName) + `) and whole cards as another (default ` + string(api.DefaultWholeResourceName) + `), gives
each container the card the gpushare scheduler extender assigned, and publishes the node's GPU
inventory (docs/deviceplugin.md). It does not register on a node where another GPU device plugin
already advertises NVIDIA GPUs (docs/install.md).`
	cmd := cli.Command("gpushare-device-plugin", "gpushare's kubelet device plugin: GPU memory as extended-resource units", long, lookupEnv, func(cmd *cobra.Command) error {
		// Checked before the client is built, so that a missing
		// NODE_NAME is reported as such outside a cluster too.
		if err := cli.LoadConfig(cmd.Flags(), o.ConfigFile, Kind, o); err != nil {
			return err
		}
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
			return nil, fmt.Errorf("ignoreXIDs: %q is not an XID number", s)
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
func (o Options) Validate() error { return cli.Usage(o.validate()) }

func (o Options) validate() error {
	if o.NodeName == "" {
		return ErrNoNodeName
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		return fmt.Errorf("kubeAPIQPS %v and kubeAPIBurst %d must be positive", o.KubeAPIQPS, o.KubeAPIBurst)
	}
	if _, err := api.ParseMemoryUnit(o.MemoryUnit); err != nil {
		return fmt.Errorf("memoryUnit: %w", err)
	}
	if _, err := o.Names.Names(); err != nil {
		return err
	}
	if _, err := response.ParseStrategy(o.DeviceListStrategy); err != nil {
		return fmt.Errorf("deviceListStrategy: %w", err)
	}
	if _, err := response.ParseDeviceIDStrategy(o.DeviceIDStrategy); err != nil {
		return fmt.Errorf("deviceIDStrategy: %w", err)
	}
	if _, err := nvml.ParseSource(o.NVML); err != nil {
		return err
	}
	if _, err := o.ignoredXIDs(); err != nil {
		return err
	}
	if o.RecordKeyDir != "" {
		if _, err := os.Stat(o.RecordKeyDir); err != nil {
			return fmt.Errorf("recordKeyDir: %w", err)
		}
	}
	if o.NodeKubeconfig != "" {
		if _, err := os.Stat(o.NodeKubeconfig); err != nil {
			return fmt.Errorf("--node-kubeconfig: %w", err)
		}
	}
	return o.validateMemory()
}

// Run runs the plugin until ctx is done. clients reach the API server;
// restart receives SIGHUP.
func Run(ctx context.Context, o Options, clients Clients, restart <-chan os.Signal) error {
	log := klog.FromContext(ctx)
	if err := o.Validate(); err != nil {
		return err
	}
	client := clients.Write
	// Validate parsed every one of these: no error is left.
	unit, _ := api.ParseMemoryUnit(o.MemoryUnit)
	strategy, _ := response.ParseStrategy(o.DeviceListStrategy)
	idStrategy, _ := response.ParseDeviceIDStrategy(o.DeviceIDStrategy)
	src, _ := nvml.ParseSource(o.NVML)
	names, _ := o.Names.Names()
	ignored, _ := o.ignoredXIDs()
	gpus, sim, err := nvml.OpenSource(src, o.NodeName, nvml.Options{IgnoredXIDs: ignored})
	if err != nil {
		if o.FailOnInitError {
			return fmt.Errorf("%w (failOnInitError: false waits instead of exiting)", err)
		}
		log.Error(err, "No GPU: waiting, advertising nothing (failOnInitError: false)")
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
	// The pod cache outlives ctx until plugin.Run has drained the admissions in flight.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	stopEarly := context.AfterFunc(ctx, endLife)
	if err := cl.Start(life); err != nil {
		return err
	}
	logNameMismatches(ctx, cl, names, log)
	if o.IsolationFile != "" {
		if _, err := isolation.Read(o.IsolationFile); err != nil {
			return fmt.Errorf("isolationFile %s: %w", o.IsolationFile, err)
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
	grant := response.Config{Names: names, Strategy: strategy, DeviceIDStrategy: idStrategy, MPS: o.Memory.mps()}
	n := agent{o: o, names: names, gpus: gpus, sim: sim, store: store, cl: cl, keys: keys, client: client, reg: reg}
	if o.DRA.Enabled {
		return runDRA(ctx, n, grant)
	}

	nodeReg := prometheus.WrapRegistererWith(prometheus.Labels{"node": o.NodeName}, reg)
	metrics, err := plugin.NewMetrics(nodeReg)
	if err != nil {
		return err
	}
	var podres, wholePodres podresources.Reader
	if o.PodResourcesSocket != "" {
		podres = podresources.NewKubelet(o.PodResourcesSocket, string(names.ResourceName()), cl.Arrival, metrics.ObservePodResourcesGets(string(names.ResourceName())))
		wholePodres = podresources.NewKubelet(o.PodResourcesSocket, string(names.WholeResourceName()), cl.Arrival, metrics.ObservePodResourcesGets(string(names.WholeResourceName())))
	}
	gauge, err := newDutiesGauge(nodeReg)
	if err != nil {
		return err
	}
	socket, wholeSocket := SocketNames(o.Instance)
	p := plugin.New(plugin.Config{
		Config:            grant,
		Metrics:           metrics,
		PluginDir:         o.DevicePluginDir,
		SocketName:        socket,
		WholeSocketName:   wholeSocket,
		AllocateWait:      o.AllocateWait,
		ReconcileInterval: o.ReconcileInterval,
		RecordKeys:        keys,
		WholeCards:        o.WholeCards,
		WholePodResources: wholePodres,
	}, store, cl, podres, log)
	previous := func() bool { return otherPodServes(o.DevicePluginDir, o.Instance) }
	memory, err := startMemory(ctx, n, podres, nil, pluginReadiness(p.Serving, previous, p.CallLimit(), clock.RealClock{}))
	if err != nil {
		return err
	}
	publish := func(ctx context.Context) { Publish(ctx, cl, store, recordKey, log) }
	go runNodeDuties(ctx, o.NodeLockFile, gauge, log, publish, memory)
	stopEarly()
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
