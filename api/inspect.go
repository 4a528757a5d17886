package api

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// The JSON the scheduler extender serves at GET /inspect (a list of
// ExtenderNode, sorted by name) and GET /inspect/{node} (one ExtenderNode):
// what the extender's cache holds and decides with, assumed binds included.
// The extender writes it and `kubectl inspect gpushare --from-extender` reads
// it; both use these types.

// ExtenderNode is one node in the extender's view.
type ExtenderNode struct {
	Name string `json:"name"`
	// Unit is the unit of Capacity and Used.
	Unit MemoryUnit `json:"unit,omitempty"`
	// InventoryError says why the node's cards are unusable, if they are,
	// for people; InventoryErrorCode says it for programs (set whenever
	// InventoryError is; an extender older than the field leaves it empty).
	InventoryError     string             `json:"inventoryError,omitempty"`
	InventoryErrorCode InventoryErrorCode `json:"inventoryErrorCode,omitempty"`
	Cards              []ExtenderCard     `json:"cards"`
	// Unplaced lists pods whose assignment names a card the node's
	// inventory does not have (e.g. the card disappeared).
	Unplaced []ExtenderPod `json:"unplaced,omitempty"`
	// DRA is true when the node serves its cards through DRA: it has a
	// ResourceSlice of the gpushare driver or claims are allocated on it
	// (an extender started with --dra only). Its cards come from
	// the slice when it has no inventory.
	DRA bool `json:"dra,omitempty"`
	// UnplacedClaims lists the claims' shares of a card the node does not
	// list (or of a node whose cards are unknown).
	UnplacedClaims []ExtenderClaim `json:"unplacedClaims,omitempty"`
}

// ExtenderCard is one card of an ExtenderNode.
type ExtenderCard struct {
	Index int       `json:"index"`
	UUID  string    `json:"uuid"`
	Model string    `json:"model,omitempty"`
	State CardState `json:"state"`
	// Reason says why the card is not healthy (Isolation.Apply).
	Reason   string `json:"reason,omitempty"`
	Capacity int64  `json:"capacity"`
	// Used is the units assigned, the claims' included; a card held whole
	// shows its capacity.
	Used int64 `json:"used"`
	// Claimed is the part of Used that DRA claims hold (Claims).
	Claimed int64 `json:"claimed,omitempty"`
	// Claims are the DRA claims allocated on the card, sorted by
	// namespace, name and request.
	Claims []ExtenderClaim `json:"claims,omitempty"`
	// Whole is true while the card is given whole (WholeResourceName) to
	// the one pod in Pods; it then takes nothing else.
	Whole bool          `json:"whole,omitempty"`
	Pods  []ExtenderPod `json:"pods"`
}

// ExtenderPod is one container's share of a card.
type ExtenderPod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Container string    `json:"container"`
	Units     int64     `json:"units"`
	// Whole marks a container holding the card whole (Units is then the
	// card's capacity).
	Whole bool `json:"whole,omitempty"`
	// State is how the extender knows of the share.
	State ExtenderPodState `json:"state"`
	// Phase is the assignment's phase: Assigned or Allocated.
	Phase AssignmentPhase `json:"phase"`
	// CardUUID is the card the record names, in ExtenderNode.Unplaced only
	// (the node's inventory does not list it; its ResourceSlice may).
	CardUUID string `json:"cardUUID,omitempty"`
}

// ExtenderClaim is one DRA claim's share of a card: an allocation result of
// the gpushare driver (DRAShare).
type ExtenderClaim struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Request   string    `json:"request"`
	// Device is the device allocated (card-N).
	Device string `json:"device"`
	// Memory is the capacity consumed; Units is it in the node's Unit
	// (DRAShare.Units; in GiB when the node's unit is unknown).
	Memory  resource.Quantity `json:"memory"`
	Units   int64             `json:"units"`
	ShareID string            `json:"shareID,omitempty"`
	// Pods are the pods the claim is reserved for, in its namespace; empty
	// while it is reserved for none (it holds its memory all the same).
	Pods []string `json:"pods"`
}

// ExtenderPodState is how the extender's cache knows of a pod's units.
type ExtenderPodState string

const (
	// ExtenderPodAssumed: recorded by bind before its API writes; not yet
	// seen by the informer.
	ExtenderPodAssumed ExtenderPodState = "assumed"
	// ExtenderPodConfirmed: the informer shows the pod bound to the node
	// with a valid assignment.
	ExtenderPodConfirmed ExtenderPodState = "confirmed"
	// ExtenderPodRemembered: the pod still holds its units (bound, not
	// finished) but its record is gone or no longer valid (removed,
	// garbled, not signed by the record key); the extender keeps counting
	// the last valid record it saw until the device plugin rewrites the
	// record from the kubelet's account or the pod finishes.
	ExtenderPodRemembered ExtenderPodState = "remembered"
)

// InventoryErrorCode classifies why a node's cards are unusable; the values
// are a stable interface, equal to the inspector's warning codes.
type InventoryErrorCode string

const (
	// InventoryErrorMissing: the node has no AnnotationInventory (ErrNoInventory).
	InventoryErrorMissing InventoryErrorCode = "NoInventory"
	// InventoryErrorInvalid: the inventory does not decode or validate
	// (ErrInvalidInventory).
	InventoryErrorInvalid InventoryErrorCode = "InvalidInventory"
	// InventoryErrorIsolation: the node's AnnotationIsolation does not parse
	// (ParseIsolation); the extender places no new pods on the node.
	InventoryErrorIsolation InventoryErrorCode = "InvalidIsolation"
	// InventoryErrorPluginNotServing: the node's device plugin is not
	// serving (ErrPluginNotServing); its cards are shown, and the extender
	// places no new GPU pods on the node until it serves again.
	InventoryErrorPluginNotServing InventoryErrorCode = "PluginNotServing"
)

// ExtenderWarningDRAUnreadable begins the text of the HTTP Warning header
// (code 299, `Warning: 299 - "DRAUnreadable: why"`) of an /inspect answer
// without the DRA claims an extender started with --dra would show:
// it has not read the ResourceSlices and ResourceClaims (yet).
const ExtenderWarningDRAUnreadable = "DRAUnreadable"

// ExtenderError is the body of every answer of the extender's HTTP server
// that is not 200: what went wrong, for people. The HTTP status is the code
// (404 at /inspect/{node}: the node is not in the extender's cache).
type ExtenderError struct {
	Error string `json:"error"`
}
