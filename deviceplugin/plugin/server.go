package plugin

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/allocate"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
)

// resource is one resource the plugin serves: its name and socket, the
// kubelet's account of it, and its ledger in the node's state.
type resource struct {
	name       corev1.ResourceName
	socketName string
	options    *pluginapi.DevicePluginOptions
	// podres is the kubelet's account of the resource (nil: not read).
	podres podresources.Reader
	ledger *ledger
	// cardsOf are the cards of a container's device IDs as the kubelet's
	// account reports them, and the IDs as the ledger keeps them.
	cardsOf func(ids []string) (cards, kept []string, err error)
}

// kind is what is particular to one resource; R is its device IDs, parsed
// at the door (allocate.Units, allocate.Cards).
type kind[R any] interface {
	// devices is the device list ListAndWatch sends.
	devices() []*pluginapi.Device
	// parse checks and parses one container request's device IDs.
	parse(ids []string) (R, error)
	// admit runs before the accounts are read: a refusal of the whole call,
	// and catching up on work left from earlier calls.
	admit(ctx context.Context, reqs []R) error
	// accounts reads the kubelet's accounts the decisions need.
	accounts(ctx context.Context) accounts
	// decide is one container request's decision (callers hold allocMu; no
	// I/O): reopened are the pods the accounts' merge reopened.
	decide(v podView, reopened []types.UID, req R, accts accounts) (decision, error)
	// respond is what the container gets.
	respond(d decision) *pluginapi.ContainerAllocateResponse
	preferred(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
	preStart(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)
}

// server is the device plugin service of one resource.
type server[R any] struct {
	pluginapi.UnimplementedDevicePluginServer
	p    *Plugin
	res  *resource
	kind kind[R]
}

// decision is one container request's outcome.
type decision struct {
	// cards are the cards the container gets (one for units); units, how
	// many units of it (0 for whole cards).
	cards []nvml.Card
	units int64
	// write names the pod whose record must be written after the lock
	// (empty UID: nothing to write); reopened, pods the kubelet's account
	// reopened on the way.
	write    podRef
	reopened []podRef
	// pod is the pod a new allocation is for (nil for a repeat), for the
	// time from its binding; container and ids, its container and the
	// kubelet's device IDs it gets.
	pod       *corev1.Pod
	container string
	ids       []string
}

// Devices is the device list ListAndWatch sends now.
func (s *server[R]) Devices() []*pluginapi.Device { return s.kind.devices() }

// GetDevicePluginOptions implements the device plugin API.
func (s *server[R]) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.res.options, nil
}

// ListAndWatch sends the device list, then again at every change of card
// state (health, isolation) and of the cards held the other way (units of a
// card held whole are Unhealthy meanwhile, and a card's whole-card device
// while units of it are held), until the kubelet or the server ends the
// stream. A wake-up that changes no device sends nothing.
func (s *server[R]) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	var last []*pluginapi.Device
	for {
		changed, held := s.p.store.Changed(), s.p.state.held.wait()
		devs := s.kind.devices()
		if last == nil || !sameDevices(devs, last) {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
			last = devs
		}
		select {
		case <-changed:
		case <-held:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// sameDevices reports whether two device lists are equal.
func sameDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Health != b[i].Health {
			return false
		}
	}
	return true
}

// GetPreferredAllocation implements the device plugin API (the kind's).
func (s *server[R]) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	start := s.p.cfg.Clock.Now()
	defer func() { s.p.cfg.Metrics.observePreferred(string(s.res.name), s.p.cfg.Clock.Since(start)) }()
	return s.kind.preferred(podresources.WithAdmission(ctx), req)
}

// PreStartContainer implements the device plugin API (the kind's).
func (s *server[R]) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return s.kind.preStart(ctx, req)
}

// Allocate answers the kubelet for each container request: the device IDs
// are parsed once, here; then which container each is for (decide, under
// allocMu), what the container gets, and, after the lock, the records
// (queued for the record writer where PreStartContainer writes them before
// the container starts: recordQueue). A failed record write does not fail
// the container: reconciliation retries it.
func (s *server[R]) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (resp *pluginapi.AllocateResponse, err error) {
	p := s.p
	ctx = podresources.WithAdmission(ctx)
	var allocated []decision
	if c, ok := s.res.podres.(kubeletAccount); ok {
		// The kubelet records this call's devices once it returns.
		defer func() {
			c.KubeletChanged()
			if err == nil {
				for _, d := range allocated {
					c.Allocated(d.pod, d.container, d.ids)
				}
			}
		}()
	}
	start := p.cfg.Clock.Now()
	var waited time.Duration
	defer func() {
		p.cfg.Metrics.observeAllocate(string(s.res.name), err, p.cfg.Clock.Since(start), waited)
	}()
	reqs := make([]R, 0, len(req.GetContainerRequests()))
	for _, cr := range req.GetContainerRequests() {
		r, err := s.kind.parse(cr.GetDevicesIds())
		if err != nil {
			p.log.Error(err, "Allocate refused", "resource", s.res.name, "devices", cr.GetDevicesIds())
			return nil, toStatus(err)
		}
		reqs = append(reqs, r)
	}
	if err := s.kind.admit(ctx, reqs); err != nil {
		p.log.Error(err, "Allocate refused", "resource", s.res.name)
		return nil, toStatus(err)
	}
	defer p.state.held.notify()
	// Once per call, before the lock: a second container of the same call
	// is not yet in the kubelet's account, and keeps the first one's
	// decision (a guess newer than the read).
	accts := s.kind.accounts(ctx)
	resp = &pluginapi.AllocateResponse{}
	var writes []podRef
	for i, r := range reqs {
		d, w, err := s.decideWaiting(ctx, r, &accts, i == 0)
		waited += w
		writes = append(writes, d.reopened...)
		if err != nil {
			p.log.Error(err, "Allocate refused", "resource", s.res.name, "devices", len(req.GetContainerRequests()[i].GetDevicesIds()))
			p.rec.writeRecords(ctx, writes)
			return nil, toStatus(err)
		}
		if d.write.UID != "" {
			writes = append(writes, d.write)
		}
		if d.pod != nil {
			allocated = append(allocated, d)
			if at, ok := api.BoundAt(d.pod); ok {
				sinceBind := p.cfg.Clock.Since(at)
				p.cfg.Metrics.observeBindToAllocate(string(s.res.name), sinceBind)
				p.log.V(2).Info("Allocated since bind", "pod", klog.KObj(d.pod), "resource", s.res.name, "sinceBind", sinceBind.Round(time.Millisecond), "waitedForPod", w.Round(time.Millisecond))
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, s.kind.respond(d))
	}
	if s.res.options.PreStartRequired {
		p.rec.queueRecords(ctx, writes) // PreStartContainer writes the record before the container starts
	} else {
		p.rec.writeRecords(ctx, writes)
	}
	select {
	case p.reconcile <- struct{}{}:
	default:
	}
	return resp, nil
}

// kubeletAccount is a PodResources that learns from the plugin's answers
// what the kubelet records (podresources.Kubelet).
type kubeletAccount interface {
	KubeletChanged()
	Allocated(pod *corev1.Pod, container string, ids []string)
	Recheck(pods []*corev1.Pod) []types.UID
}

// allocatePoll is how often Allocate looks again for a pod the kubelet saw
// before the plugin's informer.
const allocatePoll = 100 * time.Millisecond

// decideWaiting decides for one container request, waiting up to
// Config.AllocateWait for a pod the kubelet knows before the informer does
// (no waiting container of that size yet), and says how long it waited.
// allocMu is taken for each attempt and released while waiting.
func (s *server[R]) decideWaiting(ctx context.Context, r R, accts *accounts, firstOfCall bool) (decision, time.Duration, error) {
	var d decision
	var err error
	var first time.Time
	none := func() bool {
		return errors.Is(err, allocate.ErrNoPending) || errors.Is(err, allocate.ErrNoPendingCards)
	}
	var rechecked []types.UID
	look := func() bool {
		if first.IsZero() {
			first = s.p.cfg.Clock.Now()
		}
		d = decision{}
		if lerr := s.p.locked(*accts, func(v podView, reopened []types.UID) {
			for _, uid := range rechecked { // what the kubelet, asked again, shows holding nothing holds nothing
				if accts.of(s.res).holdsNothing(uid) && s.res.ledger.forgetGuesses(uid, 0, true) {
					reopened = append(reopened, uid)
				}
			}
			d, err = s.kind.decide(v, reopened, r, *accts)
		}); lerr != nil {
			err = lerr
		}
		return !none()
	}
	// Still none: what the kubelet's account was remembered to say of a pod may be of another of
	// its name (Plugin.recheck); read it again, for the call's first container only (a later one's
	// read would drop the guesses this call made: not in the account until the call returns).
	if s.p.waitFor(ctx, look); none() && firstOfCall && ctx.Err() == nil {
		if rechecked = s.p.recheck(s.res); len(rechecked) > 0 {
			if *accts = s.kind.accounts(ctx); accts.of(s.res).ok {
				look()
			}
		}
	}
	return d, s.p.cfg.Clock.Since(first), err
}

// waitFor calls look, then again at every change of the pod cache (Cluster.PodsChanged) and
// every allocatePoll (on the injected clock), until it reports done, Config.AllocateWait has
// passed since the first call, or ctx is done: the wait of Allocate and of both
// GetPreferredAllocations for a pod the kubelet saw before the plugin's informer, which ends
// as the informer delivers the pod. look takes allocMu itself; it is not held while waiting.
//
// Waiting helps only while the cache is behind the API server. So at the first miss, and every
// cacheCheckEvery polls' time after it, the plugin asks the API server (Cluster.CacheBehind,
// beside the wait: the informer usually delivers the pod before the list of the node's pods
// returns): when the cache already shows every pod of the node awaiting admission as it is, the
// wait ends at once. That is the case of a pod deleted before the kubelet admitted it (the
// kubelet may still work through its queue): waiting would hold the kubelet's admissions, every
// pod of the node behind this one, for AllocateWait.
func (p *Plugin) waitFor(ctx context.Context, look func() (done bool)) {
	now := p.cfg.Clock.Now()
	deadline, check := now.Add(p.cfg.AllocateWait), now
	changed := p.cluster.PodsChanged() // before the look: a change during it wakes the wait
	var asked chan cacheAnswer         // CacheBehind's answer while it is asked (nil: not asked)
	for !look() && p.cfg.AllocateWait > 0 && p.cfg.Clock.Now().Before(deadline) {
		if asked == nil && !p.cfg.Clock.Now().Before(check) {
			asked = make(chan cacheAnswer, 1)
			go func(ch chan<- cacheAnswer) {
				behind, err := p.cluster.CacheBehind(ctx)
				ch <- cacheAnswer{behind, err}
			}(asked)
		}
		select {
		case <-ctx.Done():
			return
		case a := <-asked:
			asked, check = nil, p.cfg.Clock.Now().Add(cacheCheckEvery*allocatePoll)
			if a.err == nil && !a.behind {
				// The cache may have caught up since the last look (CacheBehind reads it after the
				// API server): one more look, then no wait.
				if !look() {
					p.log.V(1).Info("Not waiting: the pod cache shows every pod of the node awaiting admission (a pod deleted before its admission?)")
				}
				return
			} else if a.err != nil {
				p.log.V(1).Info("Waiting for the pod cache: the API server could not be asked whether it is behind", "err", a.err)
			}
		case <-changed:
		case <-p.cfg.Clock.After(allocatePoll):
		}
		changed = p.cluster.PodsChanged()
	}
}

// cacheAnswer is what Cluster.CacheBehind said.
type cacheAnswer struct {
	behind bool
	err    error
}

// cacheCheckEvery is how many allocatePolls' time of a wait pass between two
// questions to the API server whether the pod cache is behind (1 s).
const cacheCheckEvery = 10

// waitForView is waitFor for a look at one listing of the pod cache, taken
// under allocMu with accts merged; a cache that cannot be listed ends the
// wait with its error.
func (p *Plugin) waitForView(ctx context.Context, accts accounts, look func(v podView) (done bool)) error {
	var err error
	p.waitFor(ctx, func() bool {
		done := false
		err = p.locked(accts, func(v podView, _ []types.UID) { done = look(v) })
		return err != nil || done
	})
	return err
}

// writeRecords writes each pod's record once (errors are logged: the
// reconciler retries).
func (p recorder) writeRecords(ctx context.Context, refs []podRef) {
	seen := map[podRef]bool{}
	for _, r := range refs {
		if seen[r] {
			continue
		}
		seen[r] = true
		start := p.cfg.Clock.Now()
		err := p.writeRecord(ctx, r, kubeletCall)
		p.cfg.Metrics.observeWrite(p.cfg.Clock.Since(start))
		if err != nil {
			p.log.Error(err, "Recording the allocation failed; will retry", "pod", klog.KRef(r.Namespace, r.Name))
		}
	}
}
