package replay

import (
	"cmp"
	"math/rand"
	"slices"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/allocator"
)

// DefaultInflate is the protocol's target: copies are added until the total
// GPU request reaches 130% of the cluster's capacity.
const DefaultInflate = 1.3

// CurveSteps is the number of 1% arrival steps a curve records (0..130%).
const CurveSteps = 131

// ReportAt are the arrival levels (% of capacity) reports show.
var ReportAt = []int{90, 95, 100, 110, 120, 130}

// Run is the outcome of one replay: one trace, one policy, one seed.
type Run struct {
	Trace  string `json:"trace"`
	Policy string `json:"policy"`
	Seed   int64  `json:"seed"`
	// Pods is how many pods arrived (the trace's pods plus random copies);
	// Failed how many fitted nowhere.
	Pods   int `json:"pods"`
	Failed int `json:"failed"`
	// FailedAt100 is how many pods failed before the arrived request reached
	// 100% of capacity.
	FailedAt100 int `json:"failed_at_100"`
	// Curve[k] is the allocated GPU share (% of capacity) when the arrived
	// request first reached k% of capacity, k = 0..130.
	Curve []float64 `json:"curve"`
	// Workloads is how many workload values the policy was handed (at most
	// one per pod; fewer the more the workload lags, WorkloadTolerance).
	Workloads int `json:"workloads"`
}

// AllocatedAt is the allocated share (% of capacity) at arrival pct.
func (r *Run) AllocatedAt(pct int) float64 {
	if pct < 0 || pct >= len(r.Curve) {
		return 0
	}
	return r.Curve[pct]
}

// UnallocatedAt100 is 100 − allocated at 100% arrival: the anchor's headline.
func (r *Run) UnallocatedAt100() float64 { return 100 - r.AllocatedAt(100) }

// arrivals is the protocol's arrival order: the trace's pods shuffled, then
// random copies of trace pods until the GPU request reaches inflate ×
// capacity.
func arrivals(t *Trace, seed int64, inflate float64) []PodSpec {
	rng := rand.New(rand.NewSource(seed))
	pods := make([]PodSpec, len(t.Pods))
	copy(pods, t.Pods)
	rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	var total, any int64
	for _, pod := range t.Pods {
		any += t.GPURequest(pod)
	}
	if any == 0 {
		return pods // no GPU request at all: copies would never reach the target
	}
	for _, pod := range pods {
		total += t.GPURequest(pod)
	}
	target := inflate * float64(t.Capacity())
	for float64(total) < target {
		pod := t.Pods[rng.Intn(len(t.Pods))]
		pods = append(pods, pod)
		total += t.GPURequest(pod)
	}
	return pods
}

// ReplaySampled replays trace t under policy p with seed, following the anchor's
// protocol (docs/packing.md):
//
//  1. the cluster is the trace's nodes; a pod must fit CPU, memory and GPU;
//  2. the pods are shuffled (math/rand seeded with seed), then random copies
//     of trace pods are appended until the total GPU request reaches
//     inflate × capacity; no pod ever leaves;
//  3. each pod is placed once, in order, or recorded as failed;
//  4. after every pod the allocated GPU and the arrived request, both as % of
//     capacity, update the curve.
//
// Placing one pod is exactly the extender's path: the workload learns the
// pod's shape (Workload.Observe: the scheduler sees a pod before placing
// it, and never what comes later); every node that passes kube-scheduler's
// CPU/memory fit (NodeResourcesFit: request ≤ allocatable − requested) is
// evaluated with p.Evaluate; allocator.BestNodes picks the best; ties go to
// the lowest node position in the trace (kube-scheduler would pick one of
// them at random); p.Decide on that node gives the cards, and the grants
// are applied. With percent below 100, kube-scheduler's
// percentageOfNodesToScore (docs/design.md, "Scheduling throughput"): each
// pod's candidates are the first NodesToFind(percent, nodes) nodes that pass
// kube-scheduler's own fit (CPU, memory and the node's gpu-mem total as an
// extended resource), searched from where the previous pod's search stopped,
// round the node list, as kube-scheduler's findNodesThatPassFilters does.
func ReplaySampled(t *Trace, p *allocator.Policy, seed int64, inflate float64, percent int) Run {
	return replayPodsSampled(t, p, seed, arrivals(t, seed, inflate), percent)
}

// ReplayModel is ReplaySampled with the workload the policy reads lagging
// the pods seen as the extender's cache lets it (allocator.Workload.Near):
// a new value only when a shape's share has moved by more than tol since
// the last one, or a new shape arrived. ReplaySampled uses
// allocator.WorkloadTolerance; tol 0 gives every pod the exact workload.
func ReplayModel(t *Trace, p *allocator.Policy, seed int64, inflate float64, percent int, tol float64) Run {
	return newCluster(t).replay(t, p, seed, arrivals(t, seed, inflate), percent, tol)
}

// NodesToFind is kube-scheduler v1.34's numFeasibleNodesToFind: how many
// feasible nodes a scheduling cycle looks for among all before it stops.
// percent 0 is its adaptive default (50 − nodes/125 %, at least 5 %); fewer
// than 100 nodes are all searched, and it never looks for fewer than 100.
// Worked example: 5,000 nodes, percent 0 → 10 % → 500 nodes.
func NodesToFind(percent, nodes int) int {
	const minNodes, minPercent = 100, 5
	if nodes < minNodes {
		return nodes
	}
	percent = cmp.Or(percent, max(50-nodes/125, minPercent))
	return max(nodes*percent/100, minNodes)
}

// hostFits is kube-scheduler's own fit for pod on node i: CPU and memory,
// and the node's gpu-mem total (the sum over its schedulable cards, what
// the device plugin advertises) as an extended resource.
func (c *cluster) hostFits(t *Trace, i int, pod PodSpec, req allocator.Request) bool {
	if !c.host[i].Fits(req.Host) {
		return false
	}
	var free int64
	for _, card := range c.nodes[i].Cards {
		if card.Schedulable() {
			free += card.Free()
		}
	}
	return free >= t.GPURequest(pod)
}

// replayPodsSampled places pods in order (see ReplaySampled).
func replayPodsSampled(t *Trace, p *allocator.Policy, seed int64, pods []PodSpec, percent int) Run {
	return newCluster(t).replay(t, p, seed, pods, percent, allocator.WorkloadTolerance)
}

// replay places pods in order on c (see ReplaySampled).
func (c *cluster) replay(t *Trace, p *allocator.Policy, seed int64, pods []PodSpec, percent int, tol float64) Run {
	capacity := t.Capacity()
	run := Run{Trace: t.Name, Policy: p.Name, Seed: seed, Pods: len(pods), Curve: make([]float64, CurveSteps)}
	// seen is every pod's shape so far; w is what the policy reads, handed
	// out again only when seen is no longer Near it, as the cache does.
	seen := &allocator.Workload{ModelCapacity: t.ModelCapacity()}
	var w *allocator.Workload
	var (
		arrived, allocated int64
		next               = 1 // next curve step to record; Curve[0] = 0
		decisions          = make([]allocator.Decision, 0, len(c.nodes))
		positions          = make([]int, 0, len(c.nodes))
		start              int // where kube-scheduler's next search starts (percent < 100)
	)
	for _, pod := range pods {
		req := Request(pod)
		seen.Observe(Shape(pod))
		if w == nil || !w.Near(seen, tol) {
			w = &allocator.Workload{Shapes: slices.Clone(seen.Shapes), ModelCapacity: seen.ModelCapacity}
			run.Workloads++
		}
		arrived += t.GPURequest(pod)
		decisions, positions = decisions[:0], positions[:0]
		if percent >= 100 {
			for i := range c.nodes {
				if !c.host[i].Fits(req.Host) || !c.gpuMayFit(i, pod) {
					continue
				}
				if d := p.Evaluate(&c.nodes[i], req, w); d.Fits {
					decisions = append(decisions, d)
					positions = append(positions, i)
				}
			}
		} else {
			want, n, found := NodesToFind(percent, len(c.nodes)), len(c.nodes), 0
			processed := 0
			for ; processed < n && found < want; processed++ {
				i := (start + processed) % n
				if !c.hostFits(t, i, pod, req) {
					continue
				}
				found++
				if d := p.Evaluate(&c.nodes[i], req, w); d.Fits {
					decisions = append(decisions, d)
					positions = append(positions, i)
				}
			}
			start = (start + processed) % n
		}
		if best := allocator.BestNodes(decisions); len(best) > 0 {
			allocated += c.place(positions[best[0]], p.Decide(&c.nodes[positions[best[0]]], req, w), req)
		} else {
			run.Failed++
			if float64(arrived) <= float64(capacity) {
				run.FailedAt100++
			}
		}
		a := pct(allocated, capacity)
		for next < CurveSteps && pct(arrived, capacity) >= float64(next) {
			run.Curve[next] = a
			next++
		}
	}
	for ; next < CurveSteps; next++ { // arrival stopped short (tiny traces)
		run.Curve[next] = pct(allocated, capacity)
	}
	return run
}

func pct(v, of int64) float64 { return 100 * float64(v) / float64(of) }

// cluster is the replay's state: allocator nodes (what policies see) and
// each node's free and allocatable CPU and memory.
type cluster struct {
	nodes []allocator.Node
	host  []allocator.HostResources
	alloc []allocator.HostResources
}

func newCluster(t *Trace) *cluster {
	c := &cluster{nodes: make([]allocator.Node, len(t.Nodes)), host: make([]allocator.HostResources, len(t.Nodes)), alloc: make([]allocator.HostResources, len(t.Nodes))}
	for i, n := range t.Nodes {
		c.host[i] = allocator.HostResources{CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB}
		c.alloc[i] = c.host[i]
		node := allocator.Node{Name: n.Name, Unit: t.Unit, HostFree: &c.host[i], HostAllocatable: &c.alloc[i], Cards: make([]allocator.Card, len(n.Cards))}
		for k, card := range n.Cards {
			node.Cards[k] = allocator.Card{Index: k, Model: card.Model, Capacity: card.Capacity, State: api.CardHealthy}
		}
		c.nodes[i] = node
	}
	return c
}

// gpuMayFit is a conservative shortcut, for speed only: it is false only
// when no card of node i could take pod's GPU demand (no usable card with
// enough free for a share, too few unused usable cards for whole cards), in
// which case every policy's Evaluate says the node does not fit. Skipping
// such nodes changes no decision.
func (c *cluster) gpuMayFit(i int, pod PodSpec) bool {
	if pod.Units == 0 && pod.WholeCards == 0 {
		return true
	}
	unused := 0
	for _, card := range c.nodes[i].Cards {
		if !card.Schedulable() || !modelAllowed(card.Model, pod.Models) {
			continue
		}
		if pod.WholeCards > 0 {
			if card.Used == 0 && !card.Whole {
				if unused++; unused >= pod.WholeCards {
					return true
				}
			}
			continue
		}
		if card.Free() >= pod.Units {
			return true
		}
	}
	return false
}

func modelAllowed(model string, models []string) bool {
	if len(models) == 0 {
		return true
	}
	return slices.Contains(models, model)
}

// place applies decision d for req on node i and returns the GPU units it
// allocated.
func (c *cluster) place(i int, d allocator.Decision, req allocator.Request) int64 {
	c.host[i].CPUMilli -= req.Host.CPUMilli
	c.host[i].MemoryMiB -= req.Host.MemoryMiB
	node := &c.nodes[i]
	var units int64
	for _, pl := range d.Placements {
		for _, g := range pl.Grants {
			card := &node.Cards[g.Card] // Index == position in a replayed node
			if g.Whole {
				card.Whole = true
				card.Used = card.Capacity
				units += card.Capacity
				continue
			}
			card.Used += g.Units
			units += g.Units
		}
	}
	return units
}
