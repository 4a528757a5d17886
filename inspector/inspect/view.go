package inspect

import (
	"github.com/gpushare/gpushare/api"
)

// View is what the inspector shows: the GPU nodes with their cards and the
// pods on each card, the totals, and warnings. It is the data behind every
// output format; `-o json` and `-o yaml` print it as is, so its field names
// are a stable interface. Every slice is sorted and never nil.
type View struct {
	// Version is ViewVersion; it changes only when a field changes meaning
	// or goes away (new fields may be added within a version).
	Version int `json:"version"`
	// Source says where the data came from: SourceAPIServer or
	// SourceExtender.
	Source string `json:"source"`
	// Nodes are the GPU nodes, sorted by name.
	Nodes []Node `json:"nodes"`
	// Totals sums Nodes per memory unit, sorted by unit. Nodes whose unit is
	// unknown (no readable inventory) are left out. A cluster whose nodes all
	// use one unit has one entry.
	Totals []Total `json:"totals"`
	// Warnings are problems with the nodes' GPU reporting and with pods the
	// inspector could not count, sorted by node, then pod, then code.
	Warnings []Warning `json:"warnings"`
	// Models sums the cards per model and unit (see ModelSummary), sorted by
	// model, then unit.
	Models []ModelSummary `json:"models"`
}

// ViewVersion is the version of View this program prints.
const ViewVersion = 1

// Values of View.Source.
const (
	// SourceAPIServer: nodes and pods read from the API server and decoded
	// here (Build).
	SourceAPIServer = "apiserver"
	// SourceExtender: the scheduler extender's own view of its cache
	// (FromExtender); addresses, cordons and kubelet figures are unknown.
	SourceExtender = "extender"
)

// Total is allocated and total memory in one unit.
type Total struct {
	Unit      api.MemoryUnit `json:"unit"`
	Allocated int64          `json:"allocated"`
	Total     int64          `json:"total"`
	// Percent is Allocated/Total in percent, rounded half up to a whole
	// number (see Percent).
	Percent int64 `json:"percent"`
	// InServiceAllocated and InService are Allocated and Total over the
	// cards in service only (healthy, not isolated): the utilisation of the
	// cards that can take pods. InServicePercent is their Percent.
	InServiceAllocated int64 `json:"inServiceAllocated"`
	InService          int64 `json:"inService"`
	InServicePercent   int64 `json:"inServicePercent"`
	// Free and LargestFree sum and bound the nodes' Free and LargestFree.
	Free        int64 `json:"free"`
	LargestFree int64 `json:"largestFree"`
	// FreeCards is how many cards could be given whole now (Node.FreeCards).
	FreeCards int `json:"freeCards"`
}

// Node is one GPU node: a node with example.com/gpu-mem capacity, a gpushare
// inventory, or the gpushare=true label.
type Node struct {
	Name string `json:"name"`
	// Address is the node's InternalIP, empty when it reports none.
	Address string `json:"address"`
	// Cordoned is true when the node is unschedulable (kubectl cordon).
	Cordoned bool `json:"cordoned"`
	// Unit is the unit the node's inventory declares; empty when the node has
	// no readable inventory, in which case Allocated and Total are 0 and the
	// node is left out of View.Totals.
	Unit api.MemoryUnit `json:"unit,omitempty"`
	// Allocated is the sum of the cards' Allocated; Total the sum of every
	// card's Total, whatever its state.
	Allocated int64 `json:"allocated"`
	Total     int64 `json:"total"`
	// InServiceAllocated and InService are Allocated and Total over the
	// node's cards in service (healthy, not isolated).
	InServiceAllocated int64 `json:"inServiceAllocated"`
	InService          int64 `json:"inService"`
	// Free is the memory a new pod can still get on this node: the free
	// units of its cards in service that are not held whole, 0 when the
	// node takes no new pods (cordoned, or its isolation annotation does not
	// parse). LargestFree is the most of it on one card: the largest share a
	// new container can be given. Worked example: cards of 40 GiB with 38
	// and 24 allocated: Free 2+16 = 18, LargestFree 16.
	Free        int64 `json:"free"`
	LargestFree int64 `json:"largestFree"`
	// FreeCards is how many of those cards hold nothing: what can be given
	// whole (example.com/gpu) now.
	FreeCards int `json:"freeCards"`
	// DRA is true when the node serves its cards through DRA: it has a
	// ResourceSlice of the gpushare driver, or claims are allocated on it.
	// Its cards come from the slice when it has no inventory annotation, and
	// the kubelet's example.com/gpu-mem figures are not checked.
	DRA bool `json:"dra,omitempty"`
	// Claimed is the sum of the cards' Claimed: what DRA claims hold on the
	// node (part of Allocated).
	Claimed int64 `json:"claimed,omitempty"`
	// UsedMiB is the memory in use summed over the cards that report it
	// (Card.UsedMiB), in MiB; absent when none does.
	UsedMiB *int64 `json:"usedMiB,omitempty"`
	// Capacity and Allocatable are the node's example.com/gpu-mem as the
	// kubelet reports it in the node status; nil when not reported.
	Capacity    *int64 `json:"capacity,omitempty"`
	Allocatable *int64 `json:"allocatable,omitempty"`
	// InventoryError says why the inventory could not be read; empty when
	// it was read.
	InventoryError string `json:"inventoryError,omitempty"`
	// Cards in index order.
	Cards []Card `json:"cards"`
	// Uncounted are pods bound to this node whose GPU memory could not be put
	// on any card (malformed assignment, no assignment, unknown card...).
	Uncounted []Uncounted `json:"uncounted"`
}

// Card is one GPU with the pods on it.
type Card struct {
	Index int           `json:"index"`
	UUID  string        `json:"uuid"`
	Model string        `json:"model,omitempty"`
	State api.CardState `json:"state"`
	// Reason says why the card is not healthy.
	Reason    string `json:"reason,omitempty"`
	Allocated int64  `json:"allocated"`
	Total     int64  `json:"total"`
	// UsedMiB is the GPU memory in use on the card as the device plugin last
	// published it (api.Card.UsedMiB: sampled per process, refreshed at most
	// once a minute); absent when the plugin does not sample memory.
	UsedMiB *int64 `json:"usedMiB,omitempty"`
	// Whole is true while the card is given whole (api.Names.WholeResourceName)
	// to the one container in Pods; it then counts as fully allocated.
	Whole bool `json:"whole,omitempty"`
	// Pods are the containers placed on the card by the device plugin,
	// sorted by namespace, name and container.
	Pods []Pod `json:"pods"`
	// Claimed is the memory DRA claims consume on the card, the sum of
	// Claims' Units; it is part of Allocated, beside the Pods' units.
	Claimed int64 `json:"claimed,omitempty"`
	// Claims are the DRA claims allocated on the card (the gpushare
	// driver's allocation results), sorted by namespace, name and request;
	// nil (absent in JSON) when there are none.
	Claims []Claim `json:"claims,omitempty"`
}

// Claim is one DRA ResourceClaim's share of one card: an allocation result
// of the gpushare driver (api.DRAShare) in the node's unit.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Request is the claim's request the share is for.
	Request string `json:"request"`
	// Units is the memory consumed, in the node's unit (rounded up to whole
	// units, as the node agent's request policy rounds it).
	Units int64 `json:"units"`
	// ShareID is the allocator's share ID of the card.
	ShareID string `json:"shareID,omitempty"`
	// Pods are the pods the claim is reserved for, in its namespace;
	// empty while it is reserved for none: it is allocated all the same and
	// its memory counts.
	Pods []string `json:"pods"`
}

// Pod is one container's share of one card.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Container string `json:"container"`
	// Units is the memory granted, in the node's unit.
	Units int64               `json:"units"`
	Phase api.AssignmentPhase `json:"phase"`
	// Pending is true while the assignment is in phase Assigned: the
	// extender chose the card and bound the pod, but the node's device
	// plugin has not yet given the card to the container. Its memory already
	// counts as allocated.
	Pending bool `json:"pending"`
	// Whole marks a container holding the card whole (Units is then the
	// card's total).
	Whole bool `json:"whole,omitempty"`
	// Terminating: the pod is being deleted. It still counts (api.HoldsUnits)
	// until the object is gone, although the kubelet may already have given
	// its units to the next pod (WarnTerminatingOverlap). Known from the API
	// server only; the extender's view does not say.
	Terminating bool `json:"terminating,omitempty"`
}

// Uncounted is a pod (or one of its containers) whose GPU memory the
// inspector could not place on a card.
type Uncounted struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Container is set when only one container could not be placed.
	Container string `json:"container,omitempty"`
	// Claim is true when Name is a DRA ResourceClaim's, not a pod's.
	Claim   bool        `json:"claim,omitempty"`
	Code    WarningCode `json:"code"`
	Message string      `json:"message"`
}

// WarningCode classifies a Warning; the codes are a stable interface.
type WarningCode string

const (
	// WarnNoInventory: the node has gpu-mem capacity (or the gpushare=true
	// label) but no inventory annotation.
	WarnNoInventory = WarningCode(api.InventoryErrorMissing)
	// WarnInvalidInventory: the inventory annotation does not decode or
	// validate.
	WarnInvalidInventory = WarningCode(api.InventoryErrorInvalid)
	// WarnNoCapacity: the node has an inventory but reports no gpu-mem
	// capacity: the device plugin registered nothing with the kubelet.
	WarnNoCapacity WarningCode = "NoCapacity"
	// WarnNoCards: the inventory lists no cards.
	WarnNoCards WarningCode = "NoCards"
	// WarnCapacityMismatch: the inventory's total differs from the node's
	// gpu-mem capacity.
	WarnCapacityMismatch WarningCode = "CapacityMismatch"
	// WarnAllocatableMismatch: the healthy cards' total differs from the
	// node's gpu-mem allocatable.
	WarnAllocatableMismatch WarningCode = "AllocatableMismatch"
	// WarnInvalidIsolation: the node's isolation annotation does not parse;
	// the extender places no new pods on the node.
	WarnInvalidIsolation = WarningCode(api.InventoryErrorIsolation)
	// WarnOvercommitted: a card holds more than its total.
	WarnOvercommitted WarningCode = "Overcommitted"
	// WarnTerminatingOverlap: a card holds more than its total only by
	// counting pods being deleted: the kubelet hands the units of a pod whose
	// containers stopped to the next pod before the API server deletes the
	// pod, and until then both count. It clears when the pod is gone.
	WarnTerminatingOverlap WarningCode = "TerminatingOverlap"
	// WarnMalformedAssignment: a pod's assignment does not decode, validate
	// or match the pod.
	WarnMalformedAssignment WarningCode = "MalformedAssignment"
	// WarnNoAssignment: a pod bound to a GPU node requests gpu-mem but
	// carries no assignment, so which card it uses is unknown.
	WarnNoAssignment WarningCode = "NoAssignment"
	// WarnUnknownCard: an assignment names a card the node's inventory does
	// not list.
	WarnUnknownCard WarningCode = "UnknownCard"
	// WarnUnitMismatch: an assignment's unit differs from the inventory's.
	WarnUnitMismatch WarningCode = "UnitMismatch"
	// WarnNodeUnusable: an assignment is on a node without a readable
	// inventory, or on a node that does not exist.
	WarnNodeUnusable WarningCode = "NodeUnusable"
	// WarnDRAUnreadable: the DRA ResourceSlices or ResourceClaims could not
	// be read (the user may not list them, or the extender has not read them
	// yet): DRA nodes and claims are missing from the view, which is
	// otherwise complete.
	WarnDRAUnreadable WarningCode = "DRAUnreadable"
)

// Warning is one problem, in words for people and a code for scripts.
type Warning struct {
	Node string `json:"node,omitempty"`
	// Pod is "namespace/name" when the warning is about a pod.
	Pod string `json:"pod,omitempty"`
	// Claim is "namespace/name" when the warning is about a DRA claim.
	Claim   string      `json:"claim,omitempty"`
	Code    WarningCode `json:"code"`
	Message string      `json:"message"`
}
