package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what an operation does.
type Kind string

// The operation kinds.
const (
	// KindCreate creates one bare pod.
	KindCreate Kind = "create"
	// KindBurst creates several same-size bare pods at once (one request in
	// flight per pod), the burst of issue 16.
	KindBurst Kind = "burst"
	// KindDelete deletes bare pods the plan created.
	KindDelete Kind = "delete"
	// KindScale sets a Deployment's replicas.
	KindScale Kind = "scale"
	// KindKillExtender SIGKILLs the extender and starts it again.
	KindKillExtender Kind = "kill-extender"
	// KindKillPlugin SIGKILLs a node's device plugin; its node agent restarts
	// it (as a DaemonSet would).
	KindKillPlugin Kind = "kill-plugin"
	// KindKillAgent SIGKILLs a node agent (the kubelet: device manager and
	// PodResources server) and starts it again; the plugin survives and must
	// register with the new kubelet.
	KindKillAgent Kind = "kill-agent"
	// KindIsolate sets a node's isolation annotation (no cards: removes it).
	KindIsolate Kind = "isolate"
	// KindWriters runs several writers at once: pod creations, a scale, an
	// isolation change, and foreign annotation writes on live pods and on
	// the nodes (racing the extender's, the plugin's and the agent's writes).
	KindWriters Kind = "writers"
	// KindPause waits a moment, so that checks also see quieter states.
	KindPause Kind = "pause"
)

// PodShape is a bare pod the plan creates.
type PodShape struct {
	Name string
	// Units is one entry per app container: the gpu-mem units it asks for,
	// 0 for a container without the resource.
	Units []int64
	// InitUnits > 0 adds an init container asking for that many units (a
	// pod the product refuses: api.ErrInitContainerRequest); InitPlain adds
	// an init container without a request.
	InitUnits int64
	InitPlain bool
}

// Total is the sum of the app containers' units.
func (s PodShape) Total() int64 {
	var t int64
	for _, u := range s.Units {
		t += u
	}
	return t
}

// Op is one operation of a plan.
type Op struct {
	Seq  int
	Kind Kind
	// Create: the pods to create (create, burst, writers).
	Create []PodShape
	// Delete: names of bare pods to delete (delete).
	Delete []string
	// Scale: Deployment and replicas (scale, writers when Deployment != "").
	Deployment string
	Replicas   int32
	// Node: the node killed or isolated (kill-plugin, kill-agent, isolate,
	// writers when Isolate is set).
	Node string
	// Isolate: card indexes to isolate on Node; empty lifts the isolation.
	Isolate    []int
	SetIsolate bool
	// Touch: pods that get a foreign annotation (writers).
	Touch []string
	// Pause: how long to wait (pause).
	Pause time.Duration
}

// String is the operation as the log shows it.
func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", o.Seq, o.Kind)
	for _, p := range o.Create {
		fmt.Fprintf(&b, " %s%v", p.Name, p.Units)
		if p.InitUnits > 0 {
			fmt.Fprintf(&b, "+init(%d)", p.InitUnits)
		} else if p.InitPlain {
			b.WriteString("+init")
		}
	}
	if len(o.Delete) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(o.Delete, ","))
	}
	if o.Deployment != "" {
		fmt.Fprintf(&b, " %s=%d", o.Deployment, o.Replicas)
	}
	if o.Node != "" {
		fmt.Fprintf(&b, " %s", o.Node)
	}
	if o.SetIsolate {
		fmt.Fprintf(&b, " isolate=%v", o.Isolate)
	}
	if len(o.Touch) > 0 {
		fmt.Fprintf(&b, " touch=%s", strings.Join(o.Touch, ","))
	}
	if o.Pause > 0 {
		fmt.Fprintf(&b, " %v", o.Pause)
	}
	return b.String()
}

// Topology is what a plan is made for.
type Topology struct {
	// Nodes are the simulated GPU nodes; Cards their cards' units.
	Nodes []NodeSpec
	// Deployments are the names of the run's Deployments.
	Deployments []string
	// MaxReplicas bounds a scale (default 6).
	MaxReplicas int32
	// MaxLive bounds the bare pods alive at once (default 60): at the bound
	// a creation becomes a deletion, so that a long run churns instead of
	// piling up pods that can never be placed.
	MaxLive int
}

// NodeSpec is one node of the topology.
type NodeSpec struct {
	Name  string
	Cards []int64
}

// LargestCard is the largest card's units.
func (t Topology) LargestCard() int64 {
	var m int64
	for _, n := range t.Nodes {
		for _, c := range n.Cards {
			m = max(m, c)
		}
	}
	return m
}

// LargestNode is the largest node total.
func (t Topology) LargestNode() int64 {
	var m int64
	for _, n := range t.Nodes {
		var s int64
		for _, c := range n.Cards {
			s += c
		}
		m = max(m, s)
	}
	return m
}

// weights of the kinds: a run is mostly pod churn, with a restart or an
// isolation change every dozen operations or so.
var weights = []struct {
	kind Kind
	w    int
}{
	{KindCreate, 34},
	{KindBurst, 5},
	{KindDelete, 24},
	{KindScale, 10},
	{KindKillExtender, 3},
	{KindKillPlugin, 4},
	{KindKillAgent, 3},
	{KindIsolate, 6},
	{KindWriters, 5},
	{KindPause, 6},
}

// Plan returns ops operations for the topology, a pure function of seed:
// which pods are deleted is decided from the pods the plan itself created,
// never from what the cluster did, so the same seed replays the same
// sequence.
func Plan(seed uint64, ops int, topo Topology) []Op {
	if topo.MaxReplicas <= 0 {
		topo.MaxReplicas = 6
	}
	if topo.MaxLive <= 0 {
		topo.MaxLive = 60
	}
	g := &planner{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), topo: topo}
	total := 0
	for _, w := range weights {
		total += w.w
	}
	plan := make([]Op, 0, ops)
	for seq := 1; seq <= ops; seq++ {
		n := g.rng.IntN(total)
		var kind Kind
		for _, w := range weights {
			if n < w.w {
				kind = w.kind
				break
			}
			n -= w.w
		}
		plan = append(plan, g.op(seq, kind))
	}
	return plan
}

type planner struct {
	rng  *rand.Rand
	topo Topology
	// live are the bare pods created and not yet deleted, in creation order.
	live    []string
	created int
}

func (g *planner) op(seq int, kind Kind) Op {
	if (kind == KindCreate || kind == KindBurst || kind == KindWriters) && len(g.live) >= g.topo.MaxLive {
		kind = KindDelete
	}
	o := Op{Seq: seq, Kind: kind}
	switch kind {
	case KindCreate:
		o.Create = []PodShape{g.shape()}
	case KindBurst:
		// Same size: the plugin cannot tell the pods apart by size.
		units := []int64{g.size()}
		n := 4 + g.rng.IntN(9)
		for range n {
			o.Create = append(o.Create, PodShape{Name: g.name(), Units: units})
		}
	case KindDelete:
		if len(g.live) == 0 {
			o.Kind, o.Pause = KindPause, 100*time.Millisecond
			break
		}
		n := 1
		if g.rng.IntN(5) == 0 {
			n = 2 + g.rng.IntN(4)
		}
		o.Delete = g.pick(n)
	case KindScale:
		o.Deployment, o.Replicas = g.scale()
	case KindKillExtender:
	case KindKillPlugin, KindKillAgent:
		o.Node = g.node().Name
	case KindIsolate:
		o.Node, o.Isolate = g.isolation()
		o.SetIsolate = true
	case KindWriters:
		for range 2 + g.rng.IntN(3) {
			o.Create = append(o.Create, g.shape())
		}
		if len(g.topo.Deployments) > 0 {
			o.Deployment, o.Replicas = g.scale()
		}
		if g.rng.IntN(2) == 0 {
			o.Node, o.Isolate = g.isolation()
			o.SetIsolate = true
		}
		// Touch live pods without removing them from the live set.
		for range min(len(g.live), 1+g.rng.IntN(5)) {
			name := g.live[g.rng.IntN(len(g.live))]
			if !slices.Contains(o.Touch, name) {
				o.Touch = append(o.Touch, name)
			}
		}
	case KindPause:
		o.Pause = time.Duration(200+g.rng.IntN(1800)) * time.Millisecond
	}
	// Pods created by this op join the live set after its choices above.
	for _, p := range o.Create {
		g.live = append(g.live, p.Name)
	}
	return o
}

func (g *planner) name() string {
	g.created++
	return fmt.Sprintf("p%05d", g.created)
}

// shape is a random bare pod: mostly one container, sometimes two or three
// (one of them perhaps without a request), an init container now and then.
func (g *planner) shape() PodShape {
	s := PodShape{Name: g.name()}
	n := 1
	switch r := g.rng.IntN(10); {
	case r >= 9:
		n = 3
	case r >= 7:
		n = 2
	}
	for i := range n {
		if i > 0 && g.rng.IntN(4) == 0 {
			s.Units = append(s.Units, 0)
			continue
		}
		s.Units = append(s.Units, g.size())
	}
	switch r := g.rng.IntN(100); {
	case r < 2:
		s.InitUnits = 1 + g.rng.Int64N(8)
	case r < 10:
		s.InitPlain = true
	}
	return s
}

// size is a container's request: mostly small, some up to the largest card,
// a few larger than any card (the extender must say so), a few larger than
// any node (kube-scheduler refuses them before the extender).
func (g *planner) size() int64 {
	card, node := g.topo.LargestCard(), g.topo.LargestNode()
	switch r := g.rng.IntN(100); {
	case r < 55:
		return 1 + g.rng.Int64N(12)
	case r < 80:
		return 13 + g.rng.Int64N(28)
	case r < 95:
		return 1 + g.rng.Int64N(card)
	case r < 98:
		return card + 1 + g.rng.Int64N(max(1, node-card))
	default:
		return node + 1 + g.rng.Int64N(4*node)
	}
}

// pick removes n random pods from the live set and returns them.
func (g *planner) pick(n int) []string {
	var out []string
	for range min(n, len(g.live)) {
		i := g.rng.IntN(len(g.live))
		out = append(out, g.live[i])
		g.live = slices.Delete(g.live, i, i+1)
	}
	return out
}

func (g *planner) scale() (string, int32) {
	if len(g.topo.Deployments) == 0 {
		return "", 0
	}
	return g.topo.Deployments[g.rng.IntN(len(g.topo.Deployments))], g.rng.Int32N(g.topo.MaxReplicas + 1)
}

func (g *planner) node() NodeSpec {
	return g.topo.Nodes[g.rng.IntN(len(g.topo.Nodes))]
}

// isolation picks a node and a set of its cards: a third of the time none
// (the isolation is lifted), otherwise one card, sometimes two.
func (g *planner) isolation() (string, []int) {
	n := g.node()
	if g.rng.IntN(3) == 0 || len(n.Cards) == 0 {
		return n.Name, nil
	}
	k := 1
	if len(n.Cards) > 1 && g.rng.IntN(4) == 0 {
		k = 2
	}
	idx := g.rng.Perm(len(n.Cards))[:k]
	slices.Sort(idx)
	return n.Name, idx
}
