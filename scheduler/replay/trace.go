// Package replay replays GPU-sharing workload traces through the allocator,
// the same policy code and node choice the extender runs in production, to
// measure packing quality: how much of a cluster's GPU capacity a policy
// manages to allocate as requests arrive.
//
// It owns the trace readers (Alibaba's openb CSVs and gpushare's own memory
// format), the replay loop that follows the FGD paper's protocol (see
// docs/packing.md and Replay), the reports (text table, JSON) and the PNG
// plot of allocation curves. The loop adds to the extender's code path only
// what a real cluster adds around it: kube-scheduler's CPU/memory fit filter
// and the bookkeeping of what was placed.
package replay

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// CardSpec is one GPU of a node in a trace.
type CardSpec struct {
	Model string
	// Capacity in the trace's unit (openb: 1,000 per card).
	Capacity int64
}

// NodeSpec is one node of a trace's cluster.
type NodeSpec struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	Cards     []CardSpec
}

// PodSpec is one pod of a trace.
type PodSpec struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// Units is a share of one card (num_gpu == 1); WholeCards > 0 asks for
	// that many whole cards (num_gpu > 1); both zero: a CPU-only pod.
	Units      int64
	WholeCards int
	// Models are the allowed card models (empty: any).
	Models []string
}

// Trace is a cluster and the pods that arrive on it.
type Trace struct {
	// Name labels the trace in reports (e.g. "openb_pod_list_default").
	Name string
	// Unit is the unit of card capacities and shares: "" for openb's
	// milli-GPU (a card is 1,000), api.UnitGiB for the memory format.
	Unit  api.MemoryUnit
	Nodes []NodeSpec
	Pods  []PodSpec
	// WholeCardUnits is what one whole card of a multi-card request counts
	// for in the arrived request: 1,000 for openb; for the memory format, the
	// mean card capacity of the cluster rounded to the nearest unit, since
	// which card a whole-card pod gets is only known once it is placed.
	WholeCardUnits int64
}

// Capacity is the cluster's total GPU capacity in the trace's unit.
func (t *Trace) Capacity() int64 {
	var c int64
	for _, n := range t.Nodes {
		for _, card := range n.Cards {
			c += card.Capacity
		}
	}
	return c
}

// ModelCapacity is the cluster's GPU capacity per card model, what a
// scheduler knows of its own cluster (allocator.Workload.ModelCapacity).
func (t *Trace) ModelCapacity() map[string]allocator.ModelCapacity {
	out := map[string]allocator.ModelCapacity{}
	for _, n := range t.Nodes {
		for _, c := range n.Cards {
			allocator.AddCard(out, c.Model, c.Capacity)
		}
	}
	return out
}

// Cards is the number of GPUs in the cluster.
func (t *Trace) Cards() int {
	var c int
	for _, n := range t.Nodes {
		c += len(n.Cards)
	}
	return c
}

// GPURequest is what pod p asks for in the trace's unit (the arrived request
// it adds): its share, or WholeCards × WholeCardUnits.
func (t *Trace) GPURequest(p PodSpec) int64 {
	if p.WholeCards > 0 {
		return int64(p.WholeCards) * t.WholeCardUnits
	}
	return p.Units
}

// Request is the allocator request for pod p, read the way the extender
// reads a real pod: p as a corev1.Pod (PodObject) through the contract's
// api.Names.RequestFromPod and allocator.NewRequest, so a multi-GPU task is a
// demand of N whole cards (api.Names.WholeResourceName) exactly as in production;
// the model constraint is added after. Trace.validate has checked that the
// contract accepts every pod.
func Request(p PodSpec) allocator.Request {
	pr, err := api.DefaultNames().RequestFromPod(PodObject(p))
	if err != nil {
		panic(fmt.Sprintf("pod %s: %v (Trace.validate lets no such pod through)", p.Name, err))
	}
	req := allocator.NewRequest(pr)
	req.Models = p.Models
	return req
}

// PodObject is pod p as a Kubernetes pod: one container, named as the pod,
// asking for p.WholeCards of api.Names.WholeResourceName or p.Units of
// api.Names.ResourceName (neither for a CPU-only pod), with p's CPU and memory.
func PodObject(p PodSpec) *corev1.Pod {
	c := corev1.Container{Name: p.Name, Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI),
		},
	}}
	switch {
	case p.WholeCards > 0:
		c.Resources.Limits[api.DefaultNames().WholeResourceName()] = *resource.NewQuantity(int64(p.WholeCards), resource.DecimalSI)
	case p.Units > 0:
		c.Resources.Limits[api.DefaultNames().ResourceName()] = *resource.NewQuantity(p.Units, resource.DecimalSI)
	}
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

// Shape is the workload shape of pod p, as the policy learns it online.
func Shape(p PodSpec) allocator.Shape {
	return allocator.Shape{
		Units:      p.Units,
		WholeCards: p.WholeCards,
		Models:     p.Models,
		Weight:     1,
		Host:       allocator.HostResources{CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB},
	}
}

// validate checks a trace is replayable.
func (t *Trace) validate() error {
	if len(t.Nodes) == 0 {
		return fmt.Errorf("trace %s: no nodes", t.Name)
	}
	if len(t.Pods) == 0 {
		return fmt.Errorf("trace %s: no pods", t.Name)
	}
	if t.Capacity() <= 0 {
		return fmt.Errorf("trace %s: the cluster has no GPU capacity", t.Name)
	}
	for _, p := range t.Pods {
		if p.WholeCards > 0 && t.WholeCardUnits <= 0 {
			return fmt.Errorf("trace %s: pod %s asks for whole cards but the trace has no whole-card size", t.Name, p.Name)
		}
		if _, err := api.DefaultNames().RequestFromPod(PodObject(p)); err != nil {
			return fmt.Errorf("trace %s: pod %s: %w", t.Name, p.Name, err)
		}
	}
	return nil
}

// splitModels parses a gpu_spec cell: models separated by "|", empty = any.
func splitModels(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	var out []string
	for _, m := range strings.Split(s, "|") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// Scaled is the trace's cluster and pods k times over, as one cluster: node
// and pod names get a "-copyN" suffix (N from 2; the first copy keeps its
// names), so a policy sees k times the nodes and k times the pods in the
// same proportions. It models the same workload on a larger cluster, e.g.
// what kube-scheduler's adaptive sample of 5 % costs at 15,000 nodes where
// the trace has 1,213. k ≤ 1 returns t itself.
func (t *Trace) Scaled(k int) *Trace {
	if k <= 1 {
		return t
	}
	out := *t
	out.Name = fmt.Sprintf("%s_x%d", t.Name, k)
	out.Nodes = make([]NodeSpec, 0, len(t.Nodes)*k)
	out.Pods = make([]PodSpec, 0, len(t.Pods)*k)
	for copyN := 1; copyN <= k; copyN++ {
		suffix := ""
		if copyN > 1 {
			suffix = fmt.Sprintf("-copy%d", copyN)
		}
		for _, n := range t.Nodes {
			n.Name += suffix
			out.Nodes = append(out.Nodes, n)
		}
		for _, p := range t.Pods {
			p.Name += suffix
			out.Pods = append(out.Pods, p)
		}
	}
	return &out
}
