package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/utils/clock"
)

// DeviceManager is the part of the kubelet's device manager the agent uses.
// *devicemanager.ManagerImpl implements it.
type DeviceManager interface {
	Allocate(pod *corev1.Pod, container *corev1.Container) error
	GetDeviceRunContainerOptions(pod *corev1.Pod, container *corev1.Container) (*devicemanager.DeviceRunContainerOptions, error)
	GetDevices(podUID, containerName string) devicemanager.ResourceDeviceInstances
	GetAllocatableDevices() devicemanager.ResourceDeviceInstances
	GetCapacity() (corev1.ResourceList, corev1.ResourceList, []string)
	UpdateAllocatedDevices()
	Stop() error
}

// StartDeviceManagerFunc starts a device manager that learns the pods still
// holding devices from activePods.
type StartDeviceManagerFunc func(activePods func() []*corev1.Pod) (DeviceManager, error)

// StartKubeletDeviceManager starts the real kubelet device manager. It
// serves /var/lib/kubelet/device-plugins/kubelet.sock and wipes that folder
// (keeping its checkpoint): use it only inside a private mount namespace
// (SetupKubeletDir).
func StartKubeletDeviceManager(activePods func() []*corev1.Pod) (DeviceManager, error) {
	return startDeviceManager(activePods)
}

// Config is what one agent needs.
type Config struct {
	// NodeName is the Node the agent plays the kubelet for.
	NodeName string
	// Client talks to the API server.
	Client kubernetes.Interface
	// Labels are set on the Node when the agent creates it.
	Labels map[string]string
	// StartDeviceManager starts the device manager; nil runs the node without
	// devices (no root or mount namespace needed).
	StartDeviceManager StartDeviceManagerFunc
	// PodResourcesSocket, when set (and the device manager runs), is where
	// the agent serves the kubelet's PodResources API from its device manager.
	PodResourcesSocket string
	// Plugin, when set, is a device plugin process the agent runs beside the
	// device manager, started after it.
	Plugin *PluginCommand
	// Standby, when set with Plugin, is a second plugin process the agent
	// runs beside it, as the chart's pod runs a standby container: each
	// registers on its own socket, and the device manager keeps the node's
	// devices healthy while either serves.
	Standby *PluginCommand
	// PluginPod, when set with Plugin and the device manager, is the
	// plugin's pod the agent keeps, as a DaemonSet and the kubelet would.
	PluginPod *PluginPod
	// HeartbeatInterval is how often the lease is renewed and the status
	// posted (default 10 s, the kubelet's).
	HeartbeatInterval time.Duration
	// SyncInterval bounds how long a change in pods or device capacity can go
	// unnoticed (default 1 s); pod events wake the agent at once.
	SyncInterval time.Duration
	// StatusInterval, when set, is how often a change in device capacity is
	// posted, instead of every SyncInterval: the kubelet computes its node
	// status every nodeStatusUpdateFrequency (10 s) and posts a change then,
	// so for up to that long kube-scheduler sees the allocatable of before a
	// plugin's crash.
	StatusInterval time.Duration
	// Clock is the agent's clock (default the real one).
	Clock clock.WithTicker
	// GPUProcessesFile, when set, is the simulated NVML's process file the
	// agent keeps (gpuuse.go): pods' api.Names.AnnotationSimulatedGPUUse become
	// real processes in kubelet-named cgroups, listed there with their memory.
	GPUProcessesFile string
	// NoContainerRecords leaves out the container records (the run
	// options each container got, api.Names.AnnotationSimulatedContainers)
	// that the end-to-end tests read: a write to each pod that a kubelet
	// does not make, which time-to-Ready measurements should not count.
	NoContainerRecords bool
}

// Agent is a simulated kubelet for one Node. Build it with New, run it with Run.
type Agent struct {
	cfg        Config
	readySince metav1.Time
	dm         DeviceManager
	pods       listerscorev1.PodLister
	recorder   record.EventRecorder
	wake       chan struct{}
	gpu        *gpuProcs // nil: no simulated GPU processes

	mu sync.Mutex
	// handled holds the UIDs of pods this agent admitted or rejected, so that
	// a lagging informer never makes it admit a pod twice.
	handled map[types.UID]bool
	// known holds the UIDs of pending pods this agent has begun to admit:
	// the kubelet adds a pod to its pod manager just before it admits it
	// (HandlePodAdditions), and its PodResources API answers only for pods
	// there (GetPodByName).
	known map[types.UID]bool
	// starting holds the UIDs of admitted pods whose containers are being
	// started (Agent.start).
	starting map[types.UID]bool
	// arrived is the order in which the agent's watch first saw each pod
	// bound here (arrival), the order the kubelet receives pods in.
	arrived  map[types.UID]uint64
	arrivals uint64
}

// New checks the configuration and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("node agent: no node name")
	}
	if cfg.Client == nil {
		return nil, errors.New("node agent: no API client")
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	for _, p := range []*PluginCommand{cfg.Plugin, cfg.Standby} {
		if p == nil {
			continue
		}
		if err := p.validate(); err != nil {
			return nil, err
		}
	}
	return &Agent{cfg: cfg, wake: make(chan struct{}, 1), handled: map[types.UID]bool{}, known: map[types.UID]bool{}, starting: map[types.UID]bool{}, arrived: map[types.UID]uint64{}}, nil
}

// Run registers the node, starts the device manager and the device plugin,
// and then keeps the node Ready and admits its pods until ctx ends. On the
// way out it stops the plugin (if so configured) and the device manager.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	a.readySince = metav1.NewTime(a.cfg.Clock.Now())

	if err := a.registerNode(ctx); err != nil {
		return err
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.cfg.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: a.cfg.NodeName})

	factory := informers.NewSharedInformerFactoryWithOptions(a.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	a.pods = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				a.arrive(p.UID)
			}
			a.poke()
		},
		UpdateFunc: func(any, any) { a.poke() },
		DeleteFunc: func(any) { a.poke() },
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	factory.Start(informerCtx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("pod cache of %v did not sync: %w", typ, ctx.Err())
		}
	}

	if a.cfg.StartDeviceManager != nil {
		dm, err := a.cfg.StartDeviceManager(a.activePods)
		if err != nil {
			return fmt.Errorf("node %s: %w", a.cfg.NodeName, err)
		}
		a.dm = dm
		defer func() {
			if err := dm.Stop(); err != nil {
				logger.Error(err, "Stopping the device manager")
			}
		}()
		logger.Info("Device manager started")
		if a.cfg.PodResourcesSocket != "" {
			if err := a.servePodResources(ctx, a.cfg.PodResourcesSocket); err != nil {
				return fmt.Errorf("node %s: PodResources API: %w", a.cfg.NodeName, err)
			}
			logger.Info("Serving the PodResources API", "socket", a.cfg.PodResourcesSocket)
		}
	}

	if a.cfg.GPUProcessesFile != "" {
		g, err := newGPUProcs(a.cfg.GPUProcessesFile, a.cfg.NodeName)
		if err != nil {
			logger.Error(err, "No simulated GPU processes on this node")
		} else {
			a.gpu = g
			defer g.stopAll()
		}
	}

	var wg sync.WaitGroup
	if a.cfg.Plugin != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.cfg.Plugin.supervise(ctx, a.cfg.NodeName)
		}()
		if a.cfg.Standby != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.cfg.Standby.supervise(ctx, a.cfg.NodeName)
			}()
		}
		if a.cfg.PluginPod != nil && a.dm != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.runPluginPod(ctx, a.cfg.PluginPod)
			}()
		}
	}
	defer wg.Wait()

	return a.loop(ctx)
}

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// loop posts the node's status and lease, and syncs pods, until ctx ends.
func (a *Agent) loop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	heartbeat := a.cfg.Clock.NewTicker(a.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	resync := a.cfg.Clock.NewTicker(a.cfg.SyncInterval)
	defer resync.Stop()
	statusEvery := a.cfg.StatusInterval
	if statusEvery <= 0 {
		statusEvery = a.cfg.SyncInterval
	}
	status := a.cfg.Clock.NewTicker(statusEvery)
	defer status.Stop()

	var reported corev1.NodeStatus
	postStatus := func(force bool) {
		var capacity, allocatable corev1.ResourceList
		var deleted []string
		if a.dm != nil {
			capacity, allocatable, deleted = a.dm.GetCapacity()
		}
		st := a.nodeStatus(a.cfg.Clock.Now(), capacity, allocatable, deleted)
		if !force && reflect.DeepEqual(st.Capacity, reported.Capacity) && reflect.DeepEqual(st.Allocatable, reported.Allocatable) {
			return
		}
		if err := a.patchNodeStatus(ctx, st); err != nil {
			logger.Error(err, "Posting node status")
			return
		}
		if !reflect.DeepEqual(st.Allocatable, reported.Allocatable) {
			logger.Info("Node status posted", "capacity", st.Capacity, "allocatable", st.Allocatable)
		}
		reported = st
	}
	renew := func() {
		if err := a.renewLease(ctx, a.cfg.Clock.Now()); err != nil {
			logger.Error(err, "Renewing node lease")
		}
	}
	postStatus(true)
	renew()
	for {
		a.syncPods(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C():
			renew()
			postStatus(true)
		case <-resync.C():
		case <-status.C():
			postStatus(false)
		case <-a.wake:
		}
	}
}

// activePods are the pods that hold (or may get) devices: bound to this node,
// not terminal, not being deleted. The device manager frees the devices of
// every other pod.
func (a *Agent) activePods() []*corev1.Pod {
	all, err := a.pods.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for _, p := range all {
		if p.Spec.NodeName != a.cfg.NodeName || p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out
}
