package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/nodeagent"
)

// The invariants, as violations name them.
const (
	InvRecordsCapacity   = "records: card over capacity"
	InvRecordsPlans      = "records: card over capacity, plans included"
	InvKubeletCapacity   = "kubelet: card over capacity"
	InvExtenderCapacity  = "extender: card over capacity"
	InvExtenderPlans     = "extender: card over capacity, plans included"
	InvInspectorCapacity = "inspector: card over capacity"
	InvRunningRecord     = "running container's record is not the card it got"
	InvNoRecord          = "running GPU pod without a valid record"
	InvPendingReason     = "pending pod without the extender's reason"
	InvLost              = "pod lost"
	InvSettled           = "not settled"
	InvZero              = "not back to zero"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	// Object names what broke it (pod, node/card).
	Object string
	Detail string
	// AfterOp is the operation after which the Runner saw it first (-1:
	// at the end); Repeats how many later observations showed it again.
	AfterOp int
	Repeats int
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s: %s: %s", v.Invariant, v.Object, v.Detail)
	if v.AfterOp != 0 {
		s += fmt.Sprintf(" [after op %d", v.AfterOp)
		if v.Repeats > 0 {
			s += fmt.Sprintf(", seen %d more times", v.Repeats)
		}
		s += "]"
	}
	return s
}

// Expect is what the run knows besides the observation.
type Expect struct {
	// Live are the bare pods created and not deleted on purpose, with the
	// UID the API server gave them.
	Live map[string]types.UID
	// LargestCard is the largest card of the run's nodes.
	LargestCard int64
	// Final: the run is over and has settled. Pending pods must then have
	// been judged Unschedulable with a reason that is true, and running
	// pods' records must be Allocated.
	Final bool
}

// Check returns every invariant the observation breaks.
func Check(obs *Observation, exp Expect) []Violation {
	var vs []Violation
	vs = append(vs, CheckRecordsCapacity(obs, exp.Final)...)
	vs = append(vs, CheckKubeletCapacity(obs)...)
	vs = append(vs, CheckRunOptionsCapacity(obs)...)
	vs = append(vs, CheckExtenderCapacity(obs, exp.Final)...)
	vs = append(vs, CheckRunningRecords(obs, exp.Final)...)
	vs = append(vs, CheckPending(obs, exp)...)
	vs = append(vs, CheckLost(obs, exp.Live)...)
	return vs
}

func inventories(obs *Observation) map[string]api.Inventory {
	out := map[string]api.Inventory{}
	for name, n := range obs.Nodes {
		if inv, err := api.DefaultNames().InventoryFromNode(n); err == nil {
			out[name] = inv
		}
	}
	return out
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// CheckRecordsCapacity: per card, the units of the containers the kubelet
// allocated — records Allocated, or of pods it admitted — do not exceed the
// card's units (InvRecordsCapacity, at every observation), and every record
// names a card of its node's inventory. With final, also all records of the
// pods that hold units, plans of pods not admitted yet included
// (InvRecordsPlans).
//
// Why plans count only at the end: a plan is the extender's placement of a
// pod the kubelet has not admitted, not an allocation (issue 16: "per card,
// allocated ≤ capacity"). When the kubelet admits same-size pods in another
// order than the plugin's queue, a container gets units of another card than
// planned; the plugin moves its record there and the plan of a pending
// container of that size the other way (records.go, swap): two API writes,
// one pod each. Reconciliation, and a move without a same-size partner,
// leave the other plan where it is until the kubelet's next call or the
// pending pod's own admission (by design, TestAllocate "the kubelet's truth
// arriving between two same-size admissions…"). Meanwhile the card's plans
// and allocations together may exceed it; its allocations never do.
func CheckRecordsCapacity(obs *Observation, final bool) []Violation {
	invs := inventories(obs)
	used := map[string]map[string]int64{} // node → card UUID → units
	holders := map[string]map[string][]string{}
	allocated := map[string]map[string]int64{}
	released := obs.Released()
	var vs []Violation
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Spec.NodeName == "" || !api.HoldsUnits(p) || released[podKey(p)] {
			continue
		}
		asg, err := api.DefaultNames().AssignmentFromPod(p)
		if err != nil {
			continue // CheckRunningRecords judges pods without a record
		}
		inv, ok := invs[asg.Node]
		if !ok {
			continue
		}
		for _, c := range asg.Containers {
			if _, ok := inv.CardByUUID(c.CardUUID); !ok {
				vs = append(vs, violation(InvRecordsCapacity, podKey(p), fmt.Sprintf("container %s's record names card %s, not in node %s's inventory", c.Name, c.CardUUID, asg.Node)))
				continue
			}
			if used[asg.Node] == nil {
				used[asg.Node], holders[asg.Node], allocated[asg.Node] = map[string]int64{}, map[string][]string{}, map[string]int64{}
			}
			used[asg.Node][c.CardUUID] += c.Units
			holders[asg.Node][c.CardUUID] = append(holders[asg.Node][c.CardUUID], fmt.Sprintf("%s/%s=%d%s", p.Name, c.Name, c.Units, planMark(p, asg)))
			if asg.Phase == api.PhaseAllocated || admitted(p) {
				allocated[asg.Node][c.CardUUID] += c.Units
			}
		}
	}
	for _, node := range sortedKeys(used) {
		inv := invs[node]
		for _, card := range inv.Cards {
			if u := allocated[node][card.UUID]; u > card.Units {
				vs = append(vs, violation(InvRecordsCapacity, fmt.Sprintf("%s card %d (%s)", node, card.Index, card.UUID),
					fmt.Sprintf("records hold %d of %d units: %s", u, card.Units, strings.Join(holders[node][card.UUID], " "))))
			} else if u := used[node][card.UUID]; final && u > card.Units {
				vs = append(vs, violation(InvRecordsPlans, fmt.Sprintf("%s card %d (%s)", node, card.Index, card.UUID),
					fmt.Sprintf("records hold %d of %d units: %s", u, card.Units, strings.Join(holders[node][card.UUID], " "))))
			}
		}
	}
	return vs
}

// admitted reports whether the kubelet admitted the pod: Running, or with
// container statuses.
func admitted(p *corev1.Pod) bool {
	return api.Admitted(p)
}

// Released are the pods ("namespace/name") being deleted whose units the
// kubelet's account of their node, read at this observation, no longer
// shows: their containers stopped, and the kubelet may already have handed
// the units to the next pod (its device manager frees the devices of a pod
// that is no longer active, before the API server deletes the object).
// Their records still count for the extender and the inspector until the
// object is gone (api.HoldsUnits, the conservative rule: nobody but the
// kubelet knows when the containers stopped), so a card's records may then
// hold both pods' units; the capacity checks leave released pods out, as the
// kubelet does. A node whose account was not read releases nothing.
//
// Pods the run deleted (Deleted) that the observation's List no longer has
// are released too: the extender's and the inspector's informers, read after
// the List, may not have seen the deletion yet (it is milliseconds behind),
// while the kubelet already gave the units to the next pod. A pod created
// after the List is never in Deleted, so this masks no new pod's units.
func (o *Observation) Released() map[string]bool {
	out := map[string]bool{}
	listed := make(map[string]bool, len(o.Pods))
	for i := range o.Pods {
		listed[podKey(&o.Pods[i])] = true
	}
	for key := range o.Deleted {
		if !listed[key] {
			out[key] = true
		}
	}
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
			continue
		}
		acc, ok := o.Kubelet[p.Spec.NodeName]
		if !ok {
			continue
		}
		if _, holds := acc.Containers[podKey(p)]; !holds {
			out[podKey(p)] = true
		}
	}
	return out
}

// planMark marks a holder whose record is a plan (" (plan)"): Assigned, of a
// pod not admitted yet.
func planMark(p *corev1.Pod, a api.Assignment) string {
	if a.Phase == api.PhaseAllocated || admitted(p) {
		return ""
	}
	return " (plan)"
}

// CheckKubeletCapacity: per card, the device IDs the kubelet's device manager
// has handed to containers (PodResources) do not exceed the card's units, no
// ID is held twice, and every ID names a card of the node.
func CheckKubeletCapacity(obs *Observation) []Violation {
	invs := inventories(obs)
	var vs []Violation
	for _, node := range sortedKeys(obs.Kubelet) {
		acc := obs.Kubelet[node]
		inv, ok := invs[node]
		if !ok {
			continue
		}
		held := map[string]string{}
		perCard := map[string]int64{}
		for _, key := range sortedKeys(acc.Containers) {
			for _, ctr := range sortedKeys(acc.Containers[key]) {
				for _, id := range acc.Containers[key][ctr] {
					who := key + "/" + ctr
					if other, ok := held[id]; ok {
						vs = append(vs, violation(InvKubeletCapacity, node, fmt.Sprintf("unit %s held by %s and %s", id, other, who)))
					}
					held[id] = who
					uuid, _, err := api.ParseUnitID(id)
					if err != nil {
						vs = append(vs, violation(InvKubeletCapacity, node, fmt.Sprintf("%s holds %v", who, err)))
						continue
					}
					if _, ok := inv.CardByUUID(uuid); !ok {
						vs = append(vs, violation(InvKubeletCapacity, node, fmt.Sprintf("%s holds unit %s of a card not in the inventory", who, id)))
						continue
					}
					perCard[uuid]++
				}
			}
		}
		for _, card := range inv.Cards {
			if perCard[card.UUID] > card.Units {
				vs = append(vs, violation(InvKubeletCapacity, fmt.Sprintf("%s card %d (%s)", node, card.Index, card.UUID),
					fmt.Sprintf("the kubelet handed out %d of %d units", perCard[card.UUID], card.Units)))
			}
		}
	}
	return vs
}

// CheckRunOptionsCapacity: no device ID is in the run options (the agent's
// record of what the device manager handed out) of two containers of pods
// that hold units and are not being deleted (a deleted pod's units may be
// handed on once the kubelet released them).
func CheckRunOptionsCapacity(obs *Observation) []Violation {
	var vs []Violation
	held := map[string]string{}
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Spec.NodeName == "" || !api.HoldsUnits(p) || p.DeletionTimestamp != nil {
			continue
		}
		recs, err := nodeagent.RecordsFromPod(p)
		if err != nil {
			continue
		}
		for _, c := range recs.Containers {
			for _, id := range c.DeviceIDs[string(api.DefaultNames().ResourceName())] {
				key := p.Spec.NodeName + "/" + id
				who := podKey(p) + "/" + c.Name
				if other, ok := held[key]; ok {
					vs = append(vs, violation(InvKubeletCapacity, p.Spec.NodeName, fmt.Sprintf("unit %s in the run options of %s and %s", id, other, who)))
				}
				held[key] = who
			}
		}
	}
	return vs
}

// CheckExtenderCapacity: the extender's own view (/inspect) has no card over
// its capacity in what it counts less its pods whose record is a plan
// (phase Assigned: assumed binds and pods not admitted yet; at every
// observation, InvExtenderCapacity), nor, with final, in all it counts
// (InvExtenderPlans; why: CheckRecordsCapacity).
func CheckExtenderCapacity(obs *Observation, final bool) []Violation {
	var vs []Violation
	released := obs.Released()
	for _, node := range sortedKeys(obs.Extender) {
		for _, card := range obs.Extender[node].Cards {
			allocated, used := card.Used, card.Used
			for _, p := range card.Pods {
				if released[p.Namespace+"/"+p.Name] {
					allocated -= p.Units
					used -= p.Units
				} else if p.Phase != api.PhaseAllocated {
					allocated -= p.Units
				}
			}
			obj := fmt.Sprintf("%s card %d (%s)", node, card.Index, card.UUID)
			if allocated > card.Capacity {
				vs = append(vs, violation(InvExtenderCapacity, obj, fmt.Sprintf("the extender counts %d of %d units used, %d of them Allocated: %s", card.Used, card.Capacity, allocated, extenderPods(card.Pods, released))))
			} else if final && used > card.Capacity {
				vs = append(vs, violation(InvExtenderPlans, obj, fmt.Sprintf("the extender counts %d of %d units used", card.Used, card.Capacity)))
			}
		}
	}
	return vs
}

// extenderPods is what the extender counts on a card, pod by pod
// ("ns/name c0 4 Allocated, ..."; released pods marked), for the violation.
func extenderPods(pods []api.ExtenderPod, released map[string]bool) string {
	var parts []string
	for _, p := range pods {
		part := fmt.Sprintf("%s/%s %s %d %s", p.Namespace, p.Name, p.Container, p.Units, p.Phase)
		if released[p.Namespace+"/"+p.Name] {
			part += " (released)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// CheckRunningRecords: every Running pod that asks for gpu-mem has a valid
// record for its node, and each container's record names the card of the
// units the kubelet's device manager gave it — in the container's run
// options (the agent's record of device IDs, env, mounts) and in the
// kubelet's PodResources account — with the same number of units. With
// final, the record must also be Allocated. No settling delay: this holds
// at every observation.
func CheckRunningRecords(obs *Observation, final bool) []Violation {
	var vs []Violation
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		req, err := api.DefaultNames().RequestFromPod(p)
		if err != nil || req.Empty() {
			continue
		}
		asg, err := api.DefaultNames().AssignmentFromPod(p)
		if err != nil {
			vs = append(vs, violation(InvNoRecord, podKey(p), err.Error()))
			continue
		}
		// Settled: a whole-card record is Allocated (a gpu-mem record whose
		// cards are right stays Assigned once admitted: api.HeldPhase).
		if final && len(asg.WholeCards) > 0 && asg.Phase != api.PhaseAllocated {
			vs = append(vs, violation(InvSettled, podKey(p), fmt.Sprintf("running with whole cards, record phase %s, want %s", asg.Phase, api.PhaseAllocated)))
		}
		recs, err := nodeagent.RecordsFromPod(p)
		if err != nil {
			vs = append(vs, violation(InvRunningRecord, podKey(p), err.Error()))
			continue
		}
		kubelet, haveKubelet := obs.Kubelet[p.Spec.NodeName].Containers[podKey(p)]
		for _, ca := range asg.Containers {
			rec, ok := recs.Container(ca.Name)
			if !ok {
				vs = append(vs, violation(InvRunningRecord, podKey(p), fmt.Sprintf("container %s: no run options recorded by the kubelet", ca.Name)))
				continue
			}
			for _, prob := range containerProblems(ca, rec) {
				vs = append(vs, violation(InvRunningRecord, podKey(p), prob))
			}
			if haveKubelet {
				if got := cardsOf(kubelet[ca.Name]); len(got) != 1 || got[0] != ca.CardUUID || int64(len(kubelet[ca.Name])) != ca.Units {
					vs = append(vs, violation(InvRunningRecord, podKey(p), fmt.Sprintf("container %s: record says %d units of card %d (%s), PodResources says %d units of %v",
						ca.Name, ca.Units, ca.CardIndex, ca.CardUUID, len(kubelet[ca.Name]), got)))
				}
			}
		}
	}
	return vs
}

// containerProblems compares a container's record with what the device
// manager gave it: its unit IDs, the card env and the card mount.
func containerProblems(ca api.ContainerAssignment, rec nodeagent.ContainerRecord) []string {
	var out []string
	ids := rec.DeviceIDs[string(api.DefaultNames().ResourceName())]
	if got := cardsOf(ids); len(got) != 1 || got[0] != ca.CardUUID || int64(len(ids)) != ca.Units {
		out = append(out, fmt.Sprintf("container %s: record says %d units of card %d (%s), the kubelet gave %d units of %v",
			ca.Name, ca.Units, ca.CardIndex, ca.CardUUID, len(ids), got))
	}
	if env := rec.Env[api.EnvCardUUID]; env != ca.CardUUID {
		out = append(out, fmt.Sprintf("container %s: record says card %s, the container's %s is %q", ca.Name, ca.CardUUID, api.EnvCardUUID, env))
	}
	var mounts []string
	for _, m := range rec.Mounts {
		if strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/") {
			mounts = append(mounts, strings.TrimPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/"))
		}
	}
	if len(mounts) != 1 || mounts[0] != ca.CardUUID {
		out = append(out, fmt.Sprintf("container %s: record says card %s, the container's card mounts are %v", ca.Name, ca.CardUUID, mounts))
	}
	return out
}

// cardsOf lists the distinct cards of unit IDs (unparseable IDs as they are).
func cardsOf(ids []string) []string {
	var out []string
	for _, id := range ids {
		uuid, _, err := api.ParseUnitID(id)
		if err != nil {
			uuid = id
		}
		if !slices.Contains(out, uuid) {
			out = append(out, uuid)
		}
	}
	sort.Strings(out)
	return out
}

// extenderPhrases are the extender's reasons for a node that does not fit
// (scheduler/allocator/policy.go, scheduler/server/server.go,
// api.Names.RequestFromPod's errors): kube-scheduler puts them in the pod's
// PodScheduled condition and FailedScheduling event.
var extenderPhrases = []string{
	"GPU inventory unusable", "no schedulable GPU", "more than any card holds", "no single card has",
	"whole cards", "want at least 1", "unknown to the gpushare extender", "a better node for this pod exists",
	"init containers may not request", "invalid " + string(api.DefaultNames().ResourceName()),
}

// HasExtenderReason reports whether a scheduling message carries one of the
// extender's reasons.
func HasExtenderReason(msg string) bool {
	for _, p := range extenderPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// insufficientGPUMem is kube-scheduler's own reason (NodeResourcesFit) for a
// node whose allocatable gpu-mem, less its pods' requests, is too small. The
// project's configuration keeps kube-scheduler counting the resource
// (ignoredByScheduler: false), so such a node is never sent to the extender.
const insufficientGPUMem = "Insufficient " + string(api.DefaultResourceName)

// CheckPending: every pod that kube-scheduler judged unschedulable says why
// with the extender's reason, or with kube-scheduler's Insufficient gpu-mem
// for a pod that fits a card (a pod larger than any card must get the
// extender's reason, or be refused at creation). While the run goes on a
// pod may not have been tried yet, and a scheduling error (the extender
// being restarted) is transient; with exp.Final every unbound pod must have
// been judged Unschedulable, and an Insufficient gpu-mem must be true: no
// node has that much allocatable gpu-mem free.
func CheckPending(obs *Observation, exp Expect) []Violation {
	var vs []Violation
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			continue
		}
		req, reqErr := api.DefaultNames().RequestFromPod(p)
		if reqErr == nil && req.Empty() {
			continue
		}
		var cond *corev1.PodCondition
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == corev1.PodScheduled {
				cond = &p.Status.Conditions[j]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionFalse {
			if exp.Final {
				vs = append(vs, violation(InvPendingReason, podKey(p), "unbound and never judged by kube-scheduler"))
			}
			continue
		}
		if cond.Reason != corev1.PodReasonUnschedulable {
			if exp.Final {
				vs = append(vs, violation(InvPendingReason, podKey(p), fmt.Sprintf("unbound with %s: %s", cond.Reason, cond.Message)))
			}
			continue
		}
		// The reasons; the preemption part that follows varies from try to
		// try and says nothing about them.
		msg, _, _ := strings.Cut(cond.Message, ". no new claims")
		msg, _, _ = strings.Cut(msg, ". preemption:")
		if HasExtenderReason(msg) {
			continue
		}
		if !strings.Contains(msg, insufficientGPUMem) {
			vs = append(vs, violation(InvPendingReason, podKey(p), fmt.Sprintf("message %q", cond.Message)))
			continue
		}
		var largest int64
		for _, c := range req.Containers {
			largest = max(largest, c.Units)
		}
		if largest > exp.LargestCard {
			vs = append(vs, violation(InvPendingReason, podKey(p), fmt.Sprintf("asks for %d units in one container, more than the largest card (%d), and pends with only kube-scheduler's %q", largest, exp.LargestCard, msg)))
			continue
		}
		if exp.Final {
			if node, free := freeFor(obs, req.Total()); node != "" {
				vs = append(vs, violation(InvPendingReason, podKey(p), fmt.Sprintf("says %q, but node %s has %d allocatable units free for its %d", msg, node, free, req.Total())))
			}
		}
	}
	return vs
}

// freeFor returns a node whose allocatable gpu-mem less the requests of the
// pods holding units there is at least units, if any.
func freeFor(obs *Observation, units int64) (string, int64) {
	used := map[string]int64{}
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Spec.NodeName == "" || !api.HoldsUnits(p) {
			continue
		}
		if req, err := api.DefaultNames().RequestFromPod(p); err == nil {
			used[p.Spec.NodeName] += req.Total()
		}
	}
	for _, name := range sortedKeys(obs.Nodes) {
		q := obs.Nodes[name].Status.Allocatable[api.DefaultNames().ResourceName()]
		if free := q.Value() - used[name]; free >= units {
			return name, free
		}
	}
	return "", 0
}

// CheckLost: every bare pod the run created and did not delete exists, with
// the UID it was created with.
func CheckLost(obs *Observation, live map[string]types.UID) []Violation {
	byName := map[string]*corev1.Pod{}
	for i := range obs.Pods {
		byName[obs.Pods[i].Name] = &obs.Pods[i]
	}
	var vs []Violation
	for _, name := range sortedKeys(live) {
		p, ok := byName[name]
		switch {
		case !ok:
			vs = append(vs, violation(InvLost, name, "created, never deleted by the run, and gone"))
		case p.UID != live[name]:
			vs = append(vs, violation(InvLost, name, fmt.Sprintf("created with UID %s, now %s", live[name], p.UID)))
		}
	}
	return vs
}

// CheckZero: with every pod of the run deleted, every card of every node is
// free in the extender, healthy with its full units in the inventory (and
// the node's allocatable), held by nobody in the kubelet's account (every
// unit allocatable again), and at zero in the inspector's view (inspector:
// card UUID → allocated units).
func CheckZero(obs *Observation, inspector map[string]int64) []Violation {
	var vs []Violation
	if len(obs.Pods) > 0 {
		var names []string
		for _, p := range obs.Pods {
			names = append(names, p.Name)
		}
		vs = append(vs, violation(InvZero, "pods", fmt.Sprintf("%d left: %s", len(names), strings.Join(names, " "))))
	}
	invs := inventories(obs)
	for _, name := range sortedKeys(obs.Nodes) {
		inv, ok := invs[name]
		if !ok {
			vs = append(vs, violation(InvZero, name, "no readable inventory"))
			continue
		}
		q := obs.Nodes[name].Status.Allocatable[api.DefaultNames().ResourceName()]
		if q.Value() != inv.TotalUnits() {
			vs = append(vs, violation(InvZero, name, fmt.Sprintf("allocatable %s %d, inventory %d units", api.DefaultNames().ResourceName(), q.Value(), inv.TotalUnits())))
		}
		for _, card := range inv.Cards {
			obj := fmt.Sprintf("%s card %d (%s)", name, card.Index, card.UUID)
			if card.State != api.CardHealthy {
				vs = append(vs, violation(InvZero, obj, fmt.Sprintf("inventory state %s %s", card.State, card.Reason)))
			}
			if got, ok := inspector[card.UUID]; !ok {
				vs = append(vs, violation(InvZero, obj, "missing in the inspector's view"))
			} else if got != 0 {
				vs = append(vs, violation(InvZero, obj, fmt.Sprintf("the inspector shows %d units allocated", got)))
			}
		}
		if ext, ok := obs.Extender[name]; !ok {
			vs = append(vs, violation(InvZero, name, fmt.Sprintf("missing in the extender's /inspect (%v)", obs.ExtenderErr)))
		} else {
			for _, card := range ext.Cards {
				if card.Used != 0 || len(card.Pods) != 0 {
					vs = append(vs, violation(InvZero, fmt.Sprintf("%s card %d (%s)", name, card.Index, card.UUID), fmt.Sprintf("the extender counts %d units used by %d pods", card.Used, len(card.Pods))))
				}
			}
			if len(ext.Unplaced) > 0 {
				vs = append(vs, violation(InvZero, name, fmt.Sprintf("the extender has %d unplaced pods", len(ext.Unplaced))))
			}
		}
		acc, ok := obs.Kubelet[name]
		if !ok {
			vs = append(vs, violation(InvZero, name, fmt.Sprintf("no PodResources answer: %v", obs.KubeletErr[name])))
			continue
		}
		for _, key := range sortedKeys(acc.Containers) {
			for ctr, ids := range acc.Containers[key] {
				vs = append(vs, violation(InvZero, name, fmt.Sprintf("the kubelet still has %d units with %s/%s", len(ids), key, ctr)))
			}
		}
		if int64(len(acc.Allocatable)) != inv.TotalUnits() {
			vs = append(vs, violation(InvZero, name, fmt.Sprintf("the kubelet offers %d units, the inventory has %d", len(acc.Allocatable), inv.TotalUnits())))
		}
	}
	return vs
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// recordsOf summarises what the kubelet gave each container of the pod
// (gpu-mem units per card), from the agent's record.
func recordsOf(p *corev1.Pod) ([]string, error) {
	recs, err := nodeagent.RecordsFromPod(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range recs.Containers {
		ids := c.DeviceIDs[string(api.DefaultNames().ResourceName())]
		if len(ids) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s→%v ×%d", c.Name, cardsOf(ids), len(ids)))
	}
	return out, nil
}

func violation(invariant, object, detail string) Violation {
	return Violation{Invariant: invariant, Object: object, Detail: detail}
}
