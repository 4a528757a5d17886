// Package allocator owns gpushare's placement decision: given one node's
// cards and what they already hold, can a pod's containers be placed on it,
// on which cards, and how much does the active policy like the result.
//
// Everything here is a pure function of its arguments: no I/O, no locks, no
// clock. The extender calls it on a snapshot taken from its cache; the
// packing simulator calls the very same code in its replay loop.
//
// Laid out as Kubernetes' noderesources plugin is: one shared fit (decide.go),
// one file per strategy; docs/design.md maps the files. The fragmentation-aware policies, fgd and frag, and the workload index
// they read are package frag; package registry maps configured names to
// every policy. Both import this package, which imports neither.
package allocator

import (
	"fmt"

	"github.com/gpushare/gpushare/api"
)

// Card is one GPU in a snapshot.
type Card struct {
	// Index is the card's NVML index on its node.
	Index int
	UUID  string
	Model string
	// Capacity and Used are in the node's unit. Used counts every assigned
	// container (assumed or confirmed).
	Capacity int64
	Used     int64
	// Whole is true when the card is held exclusively by a whole-card
	// demand; it then takes nothing else.
	Whole bool
	State api.CardState
}

// Free is the capacity not yet assigned (never negative).
func (c Card) Free() int64 {
	// Written without a branch on the card's state (conditional moves):
	// every policy calls it for every card of every node it evaluates.
	free := max(c.Capacity-c.Used, 0)
	if c.Whole {
		free = 0
	}
	return free
}

// Schedulable reports whether the card may take new pods.
func (c Card) Schedulable() bool { return c.State == api.CardHealthy }

// Node is one node's cards in a snapshot.
//
// The fields the policies' fast paths read (Name, Cards, InventoryErr,
// HostFree) fill the struct's first 64 bytes, one cache line, and the
// summary follows them: at 5,000 nodes the snapshots are beyond the L2
// cache, and each line a node's evaluation touches is a likely miss.
type Node struct {
	Name string
	// Cards in index order.
	Cards []Card
	// InventoryErr is set when the node's inventory could not be read; such
	// a node never fits, and the reason says why.
	InventoryErr error
	// HostFree, when not nil, is the node's CPU and memory not yet requested
	// by its pods (allocatable minus the sum of requests, as kube-scheduler's
	// NodeResourcesFit counts them), before the pod being decided is placed.
	// Optional: nil means unknown, and policies then ignore CPU and memory.
	// Decide never filters on it (kube-scheduler does); fragmentation-aware
	// policies use it to see GPUs that CPU or memory leave unusable.
	HostFree *HostResources
	// HostAllocatable, when not nil, is the node's allocatable CPU and
	// memory. Optional; no policy reads it (the simulator's model of
	// kube-scheduler's own scoring does, scheduler/replay).
	HostAllocatable *HostResources
	// sum is the totals of the schedulable cards (Summarize).
	sum summary
	// ID is a small number the node's owner (the extender's cache) gives
	// it: unique among the nodes it holds, reused once a node is gone, dense
	// from 0. The extender's evaluation memo indexes its tables by it
	// instead of hashing names. Policies never read it; 0 for every node is
	// valid, the memo is only slower.
	ID   int32
	Unit api.MemoryUnit
}

// HostResources is CPU and memory as kube-scheduler counts requests:
// CPU in millicores, memory in MiB (2^20 bytes). It is the contract's
// api.HostResources (what api.Names.RequestFromPod reads) with the allocator's
// arithmetic; convert with HostResources(h).
type HostResources api.HostResources

// Fits reports whether a request r fits in free h.
func (h HostResources) Fits(r HostResources) bool {
	return r.CPUMilli <= h.CPUMilli && r.MemoryMiB <= h.MemoryMiB
}

// Demand is what one container asks for.
type Demand struct {
	// Container is the container's name; it labels the placement and the
	// reasons.
	Container string
	// Units is a share of ONE card, in the node's unit. Ignored when
	// WholeCards > 0.
	Units int64
	// WholeCards > 0 asks for that many cards that nothing else uses, held
	// exclusively (the openb traces' multi-GPU tasks).
	WholeCards int
}

// Request is everything a pod asks for on one node.
type Request struct {
	Demands []Demand
	// Models, when not empty, restricts the pod to cards of these models
	// (exact names, as in the replayed traces).
	Models []string
	// Cards, when not nil, restricts the pod to the cards it chose
	// (api.PodRequest.Cards: models by words, exclusions, UUIDs).
	Cards *CardFilter
	// Host is the pod's CPU and memory request, as kube-scheduler counts it
	// (api.Names.RequestFromPod). Optional: the zero value means none or unknown.
	Host HostResources
}

// NewRequest is the allocator's request for a pod whose demand the contract
// has read (api.Names.RequestFromPod): one share demand per container asking for
// memory, then one whole-card demand per container asking for whole cards,
// the pod's card choice (without known models: see NewCardFilter), and the
// pod's CPU and memory. It reads nothing of the pod itself.
func NewRequest(r api.PodRequest) Request {
	out := Request{Demands: make([]Demand, 0, len(r.Containers)+len(r.WholeCards)), Host: HostResources(r.Host), Cards: NewCardFilter(r.Cards, nil)}
	for _, c := range r.Containers {
		out.Demands = append(out.Demands, Demand{Container: c.Name, Units: c.Units})
	}
	for _, c := range r.WholeCards {
		out.Demands = append(out.Demands, Demand{Container: c.Name, WholeCards: c.Cards})
	}
	return out
}

// Grant is a part of a card given to a container.
type Grant struct {
	// Card is the card's Index (not its position in Node.Cards).
	Card  int
	Units int64
	// Whole marks an exclusive whole-card grant.
	Whole bool
}

// Placement is where one container goes.
type Placement struct {
	Container string
	Grants    []Grant
}

// ReasonCode classifies why a node does not fit.
type ReasonCode string

const (
	// ReasonNoInventory: the node's inventory is missing or unreadable.
	ReasonNoInventory ReasonCode = "NoInventory"
	// ReasonNoSchedulableCard: every card is unhealthy or isolated (or the
	// node has none, or none of an allowed model).
	ReasonNoSchedulableCard ReasonCode = "NoSchedulableCard"
	// ReasonLargerThanAnyCard: a container asks for more than any usable card holds.
	ReasonLargerThanAnyCard ReasonCode = "LargerThanAnyCard"
	// ReasonInsufficientFree: the cards are big enough but too full.
	ReasonInsufficientFree ReasonCode = "InsufficientFree"
	// ReasonNotEnoughWholeCards: fewer unused cards than a whole-card demand asks for.
	ReasonNotEnoughWholeCards ReasonCode = "NotEnoughWholeCards"
	// ReasonMoreCardsThanNode: the pod's whole-card demands ask for more
	// cards than the node has usable, even with nothing else on them.
	ReasonMoreCardsThanNode ReasonCode = "MoreCardsThanNode"
	// ReasonInvalidDemand: a demand is not positive.
	ReasonInvalidDemand ReasonCode = "InvalidDemand"
)

// Reason explains why a node does not fit, for people: it ends up in the
// pod's FailedScheduling event.
type Reason struct {
	Code      ReasonCode
	Container string
	Message   string
}

func (r Reason) String() string { return r.Message }

// Decision is a policy's verdict on one node for one pod.
type Decision struct {
	Node string
	Fits bool
	// Reasons is set when !Fits.
	Reasons []Reason
	// Placements is set when Fits, one per demand, in the request's order.
	Placements []Placement
	// Score is the policy's preference for this node, higher is better. It
	// is comparable between nodes for the same pod and policy only; the
	// extender rescales it to the 0–10 range of the extender protocol.
	Score float64
}

// Message joins the reasons into one line.
func (d Decision) Message() string {
	switch len(d.Reasons) {
	case 0:
		return ""
	case 1:
		return d.Reasons[0].Message
	}
	s := d.Reasons[0].Message
	for _, r := range d.Reasons[1:] {
		s += "; " + r.Message
	}
	return s
}

func quantity(units int64, unit api.MemoryUnit) string {
	if unit == "" {
		return fmt.Sprintf("%d units", units)
	}
	return fmt.Sprintf("%d %s", units, unit)
}
