package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/api"
)

// ErrDRANotSynced: the DRA informers have not listed the ResourceSlices
// and ResourceClaims yet (or may not: see the extender's log).
var ErrDRANotSynced = errors.New("the extender has not read the DRA ResourceSlices and ResourceClaims yet (its ClusterRole needs list and watch on resourceslices and resourceclaims of resource.k8s.io; the chart grants them with dra.enabled)")

// DRA reads the gpushare DRA driver's ResourceSlices and the
// ResourceClaims through informers of its own, for /inspect only: the
// extender places no pod with them. It is apart from the cache's pod and
// node informers so that its sync never holds the extender's readiness.
type DRA struct {
	names          api.Names
	slices, claims toolscache.SharedIndexInformer
	// score is the DRA prioritize verb's view (drascore.go).
	score draScore
}

// NewDRA builds the informers (only names' driver's slices, every claim);
// Run starts them.
func NewDRA(client kubernetes.Interface, names api.Names, resync time.Duration) *DRA {
	names = names.OrDefault()
	byDriver := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.driver", names.DRADriver()).String()
	}
	d := &DRA{
		names:  names,
		slices: resourceinformers.NewFilteredResourceSliceInformer(client, resync, toolscache.Indexers{}, byDriver),
		claims: resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, resync, toolscache.Indexers{}),
	}
	return d
}

// Run runs the informers until ctx ends. A list or watch the API server
// refuses is logged saying which permission is missing, and retried.
func (d *DRA) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("dra")
	for _, inf := range []toolscache.SharedIndexInformer{d.slices, d.claims} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("DRA informer transform: %w", err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, r *toolscache.Reflector, err error) {
			if apierrors.IsForbidden(err) {
				logger.Error(err, "Cannot read the DRA objects: /inspect shows no DRA claims until the extender's ClusterRole allows list and watch on resourceslices and resourceclaims of resource.k8s.io (the chart's does with dra.enabled)", "resource", r.TypeDescription())
				return
			}
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return fmt.Errorf("DRA informer: %w", err)
		}
		if _, err := inf.AddEventHandler(d.score.changes()); err != nil {
			return fmt.Errorf("DRA informer: %w", err)
		}
		go inf.RunWithContext(ctx)
	}
	return nil
}

// Usage is what the driver holds per node (api.Names.DRAUsage) over what
// the informers hold now; ErrDRANotSynced until both have listed once.
func (d *DRA) Usage() (map[string]*api.DRANode, error) {
	if !d.slices.HasSynced() || !d.claims.HasSynced() {
		return nil, ErrDRANotSynced
	}
	sl, err := resourcelisters.NewResourceSliceLister(d.slices.GetIndexer()).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	cl, err := resourcelisters.NewResourceClaimLister(d.claims.GetIndexer()).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return d.names.DRAUsage(sl, cl), nil
}

// placeOnSliceCards puts the device-plugin pods whose record names a card
// of the slice on it: the slice withholds what they hold, so the card's
// Capacity is what it offers plus their units. It returns the pods left
// unplaced, in a new slice.
func placeOnSliceCards(cards []api.ExtenderCard, unplaced []api.ExtenderPod) []api.ExtenderPod {
	var left []api.ExtenderPod
	for _, p := range unplaced {
		i := slices.IndexFunc(cards, func(c api.ExtenderCard) bool { return c.UUID != "" && c.UUID == p.CardUUID })
		if i < 0 || p.Whole {
			left = append(left, p)
			continue
		}
		p.CardUUID = ""
		cards[i].Pods = append(cards[i].Pods, p)
		cards[i].Used += p.Units
		cards[i].Capacity += p.Units
	}
	return left
}

// AddDRA puts what the DRA driver holds (api.Names.DRAUsage) on the
// extender's nodes, as the inspector's Build does on its view: a node with
// a ResourceSlice or claims is DRA; one without an inventory gets the
// slice's cards (Capacity: the memory the slice offers plus what the
// device-plugin pods its records put there hold, placeOnSliceCards), and
// the device plugin's absence or inventory is no error there; each claim's memory is
// added to its card's Used and Claimed, or listed in UnplacedClaims when
// the node does not list the card. It is a pure function; nodes is not
// changed.
func AddDRA(nodes []api.ExtenderNode, usage map[string]*api.DRANode) []api.ExtenderNode {
	out := make([]api.ExtenderNode, len(nodes))
	for i, n := range nodes {
		d := usage[n.Name]
		if d == nil {
			out[i] = n
			continue
		}
		n.DRA = true
		n.Cards = slices.Clone(n.Cards)
		if d.Sliced {
			if n.InventoryErrorCode != api.InventoryErrorIsolation {
				n.InventoryError, n.InventoryErrorCode = "", ""
			}
			if len(n.Cards) == 0 {
				n.Unit = d.Unit
				for _, c := range d.Cards {
					n.Cards = append(n.Cards, api.ExtenderCard{Index: c.Index, UUID: c.UUID, Model: c.Model, State: c.State, Reason: c.Reason, Capacity: c.Offered, Pods: []api.ExtenderPod{}})
				}
				n.Unplaced = placeOnSliceCards(n.Cards, n.Unplaced)
			}
		}
		place := func(s api.DRAShare, uuid string) {
			ec := api.ExtenderClaim{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Request: s.Request, Device: s.Device, Memory: s.Memory, Units: s.Units(n.Unit), ShareID: s.ShareID, Pods: append([]string{}, s.Pods...)}
			index, ok := api.DRACardIndex(s.Device)
			for ci := range n.Cards {
				c := &n.Cards[ci]
				if ok && c.Index == index && (uuid == "" || c.UUID == uuid) {
					c.Used += ec.Units
					c.Claimed += ec.Units
					c.Claims = append(slices.Clip(c.Claims), ec)
					return
				}
			}
			n.UnplacedClaims = append(n.UnplacedClaims, ec)
		}
		for _, c := range d.Cards {
			for _, s := range c.Claims {
				place(s, c.UUID)
			}
		}
		for _, s := range d.Unplaced {
			place(s, "")
		}
		for ci := range n.Cards {
			slices.SortFunc(n.Cards[ci].Claims, func(a, b api.ExtenderClaim) int {
				return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Request, b.Request))
			})
		}
		out[i] = n
	}
	return out
}
