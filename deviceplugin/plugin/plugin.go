// Package plugin is the gpushare node agent's kubelet device plugin: the
// gRPC service the kubelet calls (ListAndWatch, GetPreferredAllocation,
// Allocate, PreStartContainer), its registration with the kubelet and its
// re-registration when the kubelet restarts, and the reconciliation of pods'
// assignment records with what the kubelet actually allocated.
//
// The plugin serves two resources from the same cards, gpu-mem units and
// whole cards, each as an instance of one design (as NVIDIA's device plugin
// runs one server per resource): one server type (server.go), one ledger
// type, one read of the kubelet's account, instantiated per resource; what
// differs between the two is a kind (units.go, cards.go) whose decisions
// are pure functions of package allocate. The node's state — which card is
// held by whom, in what form — is one value both fronts read and write
// (state.go). Where each step lives:
//
//   - server.go: the device plugin API methods of one resource, and the
//     Allocate flow they share (parse at the door, read the accounts, decide
//     under the lock, answer, write the records after it).
//   - units.go, cards.go: what is particular to gpu-mem units and to whole
//     cards (devices, preferences, decisions, responses); in units.go too,
//     toStatus (errors to gRPC codes).
//   - state.go: the node's state (both ledgers, the lock, the cards' use)
//     and the one "lock, list the pods, merge the accounts" step.
//   - account.go (accountReader): the kubelet's own account (PodResources) of
//     a resource, read outside the lock and merged into its ledger under it.
//   - ledger.go: which container holds which devices (guesses and truth).
//   - records.go, writer.go (recorder): writing the pods' assignment records;
//     reconcile.go (reconciler): reconciliation.
//   - run.go (registrar): serving the sockets and registering with the kubelet.
//
// Locking: allocMu (nodeState.mu) serialises decisions (snapshot, match,
// ledger update) and is never held across a gRPC or API call; the
// PodResources reads come before it and the record PATCH after it.
package plugin

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/inventory"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/deviceplugin/response"
)

// Config is the plugin's configuration.
type Config struct {
	// Config shapes the container response: the resources' names, the
	// device list and ID strategies, MPS.
	response.Config
	// Metrics times the calls (nil: none).
	Metrics *Metrics
	// PluginDir is the kubelet's device-plugin directory.
	PluginDir string
	// SocketName is the plugin's socket file in PluginDir.
	SocketName string
	// AllocateWait is how long Allocate waits for the pod it is for to reach
	// the plugin's pod cache (the kubelet may see a pod first).
	AllocateWait time.Duration
	// ReconcileInterval is how often records are reconciled with the kubelet.
	ReconcileInterval time.Duration
	// ListAndWatchGrace is how long after a registration the kubelet has to
	// open ListAndWatch before the plugin serves and registers again
	// (default 10 s; negative: never). A kubelet opens it at once; one that
	// does not has dropped the registration (see Run).
	ListAndWatchGrace time.Duration
	// RegisterTimeout bounds one registration with the kubelet (default
	// DefaultRegisterTimeout). Keep it above the kubelet's own 10 s dial of
	// the plugin's socket (see DefaultRegisterTimeout).
	RegisterTimeout time.Duration
	// Clock times the wait for a late pod and the reconciler (default: the
	// real clock).
	Clock clock.WithTicker
	// WholeCards serves the whole-card resource (api.Names.WholeResourceName) from
	// the same cards, on its own socket WholeSocketName (default
	// gpushare-whole.sock), with WholePodResources (may be nil) its kubelet
	// account; see cards.go.
	WholeCards        bool
	WholeSocketName   string
	WholePodResources podresources.Reader
	// RecordKeys, when set, make the plugin trust only records the extender
	// signed (an unsigned or badly signed one gives its pod no card), and
	// sign the records it updates (api.RecordKeys), with the keys in force
	// at each decision (a rotating Secret: internal/recordkey.Ring).
	RecordKeys api.RecordKeyring
}

// DefaultRegisterTimeout is Config.RegisterTimeout's default: longer than
// the kubelet's dial of the plugin's socket (kubeletDialTimeout), so that
// the plugin always gets the kubelet's own answer. The kubelet (v1.34,
// devicemanager/plugin/v1beta1 server.connectClient) registers a client
// under the resource name, dials the plugin's socket for up to 10 s, and on
// failure deregisters whatever client that name then has. A plugin that gave
// up first and registered again within those seconds (the kubelet's
// directory wipe at a restart removes a socket the plugin has just made)
// saw its new registration succeed and then dropped by the old one's clean-
// up: the node kept offering gpu-mem that no plugin served, and never marked
// it unhealthy. Waiting for the answer orders the two.
const DefaultRegisterTimeout = 20 * time.Second

// kubeletDialTimeout is the kubelet's dial timeout of a plugin's socket
// (v1.34, devicemanager/plugin/v1beta1 client.go dial).
const kubeletDialTimeout = 10 * time.Second

// DefaultListAndWatchGrace is Config.ListAndWatchGrace's default.
const DefaultListAndWatchGrace = 10 * time.Second

// recordTimeout bounds the writes of one record (GET, PATCH, retries).
const recordTimeout = 5 * time.Second

// Cluster is what the plugin needs from the API server.
type Cluster interface {
	// Pods lists the pods bound to the node (an informer's cache).
	Pods() ([]*corev1.Pod, error)
	// UpdateAssignment applies mutate to the pod's assignment record.
	UpdateAssignment(ctx context.Context, namespace, name string, uid types.UID, mutate func(*api.Assignment) bool) error
	// RepairAssignment replaces the pod's record (whatever it is) with the
	// one rebuild returns for the pod as read, if it returns one.
	RepairAssignment(ctx context.Context, namespace, name string, uid types.UID, rebuild func(*corev1.Pod) (api.Assignment, bool)) error
	// Arrival is the order in which the pod cache first saw the pod bound
	// to the node (false: not seen); see allocate.State.Arrival.
	Arrival(uid types.UID) (uint64, bool)
	// CacheBehind reports whether the API server has a pod of the node
	// awaiting admission that Pods does not show as it is (absent, or at
	// another version): only then can waiting for the cache help.
	CacheBehind(ctx context.Context) (bool, error)
	// RecordAhead reports whether the plugin wrote pod's record after the
	// version pod (from Pods) shows.
	RecordAhead(pod *corev1.Pod) bool
	// PodsChanged is closed when Pods may show something new (nil: no notice; the plugin
	// looks again every allocatePoll).
	PodsChanged() <-chan struct{}
}

// Plugin serves the kubelet. Build it with New.
type Plugin struct {
	cfg     Config
	store   *inventory.Store
	cluster Cluster
	// getDisabled logs once that the kubelet does not serve PodResources Get.
	getDisabled sync.Once
	log         klog.Logger

	// state is the node's state: which card is held by whom, in what form.
	state     nodeState
	reconcile chan struct{}
	// records are the records Allocate leaves to the record writer.
	records *recordQueue

	// units and whole are the two resources served: gpu-mem units and
	// whole cards.
	units *server[allocate.Units]
	whole *server[allocate.Cards]

	// unitsAccount: the last read of the kubelet's account of gpu-mem units succeeded.
	unitsAccount atomic.Bool
	// open: resource name -> *atomic.Int32, the kubelet's ListAndWatch
	// streams open on that resource's endpoint (Serving).
	open sync.Map
	// Its groups of work (New sets them), each with its methods over its state.
	rec   recorder
	recon reconciler
	acct  accountReader
	reg   registrar
}

// The plugin's groups of work (see the package doc), each with its own methods.
type (
	recorder      struct{ *Plugin }
	reconciler    struct{ *Plugin }
	accountReader struct{ *Plugin }
	registrar     struct{ *Plugin }
)

// New builds the plugin. podres may be nil.
func New(cfg Config, store *inventory.Store, cluster Cluster, podres podresources.Reader, log klog.Logger) *Plugin {
	cfg.SocketName = cmp.Or(cfg.SocketName, "gpushare.sock")
	cfg.WholeSocketName = cmp.Or(cfg.WholeSocketName, "gpushare-whole.sock")
	cfg.PluginDir = cmp.Or(cfg.PluginDir, pluginapi.DevicePluginPath)
	cfg.ReconcileInterval = cmp.Or(cfg.ReconcileInterval, 10*time.Second)
	cfg.ListAndWatchGrace = cmp.Or(cfg.ListAndWatchGrace, DefaultListAndWatchGrace)
	cfg.RegisterTimeout = cmp.Or(cfg.RegisterTimeout, DefaultRegisterTimeout)
	cfg.Names = cfg.Names.OrDefault()
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	p := &Plugin{cfg: cfg, store: store, cluster: cluster, log: log, reconcile: make(chan struct{}, 1), records: newRecordQueue(), state: newNodeState()}
	p.rec, p.recon, p.acct, p.reg = recorder{p}, reconciler{p}, accountReader{p}, registrar{p}
	// One server type per resource, each with its kind, account and ledger.
	p.units = &server[allocate.Units]{p: p, kind: units{p}, res: &resource{name: cfg.Names.ResourceName(), socketName: cfg.SocketName, options: &unitOptions, podres: podres, ledger: p.state.units, cardsOf: unitCards}}
	p.whole = &server[allocate.Cards]{p: p, kind: cards{p}, res: &resource{name: cfg.Names.WholeResourceName(), socketName: cfg.WholeSocketName, options: &cardOptions, podres: cfg.WholePodResources, ledger: p.state.whole, cardsOf: wholeCards}}
	return p
}

// keys are the record keys in force now.
func (p *Plugin) keys() api.RecordKeys { return api.KeysOf(p.cfg.RecordKeys) }
