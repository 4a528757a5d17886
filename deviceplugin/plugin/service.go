package plugin

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/deviceplugin/allocate"
)

// GetDevicePluginOptions implements the device plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch sends the device list, then again at every change of card
// state (health, isolation) and of the cards held whole (whose units are
// Unhealthy meanwhile, see whole.go), until the kubelet or the server ends
// the stream. A wake-up that changes no device sends nothing.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	var last []*pluginapi.Device
	for {
		changed, held := p.store.Changed(), p.held.wait()
		devs := p.unitDevices()
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

// GetPreferredAllocation steers the kubelet to units of the card assigned to
// the container it is about to allocate (allocate.Preferred).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	for _, cr := range req.GetContainerRequests() {
		if err := allocate.CheckIDs(cr.GetAvailableDeviceIDs()); err != nil {
			return nil, toStatus(err)
		}
		if err := allocate.CheckIDs(cr.GetMustIncludeDeviceIDs()); err != nil {
			return nil, toStatus(err)
		}
		if cr.GetAllocationSize() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "allocation size %d is negative", cr.GetAllocationSize())
		}
	}
	sizes := make([]int, 0, len(req.GetContainerRequests()))
	for _, cr := range req.GetContainerRequests() {
		if len(cr.GetMustIncludeDeviceIDs()) == 0 {
			sizes = append(sizes, int(cr.GetAllocationSize()))
		}
	}
	snap, held, err := p.preferredSnapshot(ctx, sizes)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		// Units the kubelet's own account shows held by a live pod are not
		// offered, should the kubelet have forgotten their reservation
		// (Allocate refuses them: account.heldByOther).
		avail := cr.GetAvailableDeviceIDs()
		if len(held) > 0 {
			avail = slices.DeleteFunc(slices.Clone(avail), func(id string) bool { return held[id] })
		}
		ids := allocate.Preferred(snap, avail, cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// preferredSnapshot is the snapshot GetPreferredAllocation decides on, and
// the units the kubelet's account shows held. Like Allocate
// (decideWaiting), it waits up to Config.AllocateWait, looking again every
// allocatePoll, for a container of each requested size to be queued: the
// kubelet may ask before the pod reaches the plugin's informer, and a
// preference made without the pod would be a best-fit guess, not the card
// the extender assigned (Allocate then corrects the record to the card the
// kubelet gave). After the wait, or when the kubelet gives up, it answers
// with what it knows. allocMu is taken for each look and released while
// waiting.
func (p *Plugin) preferredSnapshot(ctx context.Context, sizes []int) (allocate.Snapshot, map[string]bool, error) {
	acct, account := p.readAccount(ctx)
	var snap allocate.Snapshot
	var held map[string]bool
	err := p.waitForView(ctx, func(v podView) bool {
		held = nil
		if account {
			p.merge(acct)
			held = acct.heldUnits(v)
		}
		snap = p.snapshot(v, account)
		return allocate.Explains(snap, sizes)
	})
	if err != nil {
		return allocate.Snapshot{}, nil, err
	}
	return snap, held, nil
}

// Allocate answers the kubelet for each container request: which container
// it is for (decide, under allocMu), what the container gets, and, after the
// lock, the records. A failed record write does not fail the container:
// reconciliation retries it.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	var cards []string
	for _, cr := range req.GetContainerRequests() {
		card, err := allocate.CardOf(cr.GetDevicesIds())
		if err != nil {
			p.log.Error(err, "Allocate refused", "devices", cr.GetDevicesIds())
			return nil, toStatus(err)
		}
		cards = append(cards, card)
	}
	// Units of a card held whole are never handed out (whole.go).
	if err := p.refuseHeldWhole(ctx, cards); err != nil {
		p.log.Error(err, "Allocate refused")
		return nil, toStatus(err)
	}
	defer p.held.notify()
	p.swapDeferred(ctx)
	// Once per call, before the lock: a second container of the same call
	// is not yet in the kubelet's account, and keeps the first one's
	// decision (a guess newer than the read).
	acct, account := p.readAccount(ctx)
	resp := &pluginapi.AllocateResponse{}
	var writes []podRef
	for _, cr := range req.GetContainerRequests() {
		d, err := p.decideWaiting(ctx, cr.GetDevicesIds(), acct, account)
		writes = append(writes, d.reopened...)
		if err != nil {
			p.log.Error(err, "Allocate refused", "devices", len(cr.GetDevicesIds()))
			p.writeRecords(ctx, writes)
			return nil, toStatus(err)
		}
		if d.write.UID != "" {
			writes = append(writes, d.write)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, p.response(d.card, d.units))
	}
	p.writeRecords(ctx, writes)
	select {
	case p.reconcile <- struct{}{}:
	default:
	}
	return resp, nil
}

// writeRecords writes each pod's record once (errors are logged: the
// reconciler retries).
func (p *Plugin) writeRecords(ctx context.Context, refs []podRef) {
	seen := map[podRef]bool{}
	for _, r := range refs {
		if seen[r] {
			continue
		}
		seen[r] = true
		if err := p.writeRecord(ctx, r, kubeletCall); err != nil {
			p.log.Error(err, "Recording the allocation failed; will retry", "pod", klog.KRef(r.Namespace, r.Name))
		}
	}
}

// PreStartContainer is called by the kubelet before it starts each
// container (PreStartRequired), with the container's device IDs, and the
// container starts only once it returns. With the kubelet's account the
// plugin learns here, for certain, which container holds the IDs — the
// kubelet recorded the allocation when Allocate returned — and writes that
// container's record (and reverts any guess the account contradicts)
// before answering: a running container's record names the card it got,
// at every observation, however the plugin guessed at Allocate. Without
// the account there is nothing to learn; Allocate already wrote the record.
//
// A failed write fails the call: the kubelet then retries the container
// start, rather than run a container its record misnames.
func (p *Plugin) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	ids := req.GetDevicesIds()
	if _, err := allocate.CardOf(ids); err != nil {
		return nil, toStatus(err)
	}
	p.swapDeferred(ctx)
	acct, account := p.readAccount(ctx)
	if !account {
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	p.allocMu.Lock()
	v, err := p.view()
	if err != nil {
		p.allocMu.Unlock()
		return nil, toStatus(err)
	}
	refs := v.refs(p.merge(acct))
	h, held := p.ledger.byDeviceIDs(ids)
	p.allocMu.Unlock()
	p.writeRecords(ctx, refs)
	if !held || h.Guess {
		// Not (yet) in the kubelet's account: nothing certain to record.
		p.log.V(2).Info("PreStartContainer for units the kubelet's account does not show", "devices", len(ids))
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	p.ledger.start(h.UID, h.Container)
	ref := podRef{Namespace: h.Namespace, Name: h.Pod, UID: h.UID}
	if err := p.writeRecord(ctx, ref, kubeletCall); err != nil {
		return nil, status.Errorf(codes.Unavailable, "recording that pod %s/%s container %s holds units of card %s: %v; the kubelet retries the container start", h.Namespace, h.Pod, h.Container, h.Card, err)
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}
