package usage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/deviceplugin/podresources"
	"github.com/gpushare/gpushare/internal/podtest"
)

const gib = int64(1) << 30

// fakeNVML reports processes per card UUID; a card in fail answers an error.
type fakeNVML struct {
	procs map[string][]nvml.Process
	fail  map[string]bool
}

func (f *fakeNVML) Processes(uuid string) ([]nvml.Process, error) {
	if f.fail[uuid] {
		return nil, fmt.Errorf("nvml: card %s: GPU is lost", uuid)
	}
	return f.procs[uuid], nil
}

type fakePodResources []podresources.Holding

// Get returns the holdings of the named pods.
func (f fakePodResources) Get(_ context.Context, pods []*corev1.Pod) ([]podresources.Holding, error) {
	asked := map[string]bool{}
	for _, p := range pods {
		asked[p.Namespace+"/"+p.Name] = true
	}
	var out []podresources.Holding
	for _, h := range f {
		if asked[h.Namespace+"/"+h.Pod] {
			out = append(out, h)
		}
	}
	return out, nil
}

// node is a simulated node for the sampler: cards, a fake /proc tree,
// pods and the kubelet's holdings.
type node struct {
	t      testing.TB
	proc   string
	cards  []nvml.Card
	nv     *fakeNVML
	pods   []*corev1.Pod
	holds  fakePodResources
	nextID int
}

func newNode(t testing.TB, cards int) *node {
	n := &node{t: t, proc: t.TempDir(), nv: &fakeNVML{procs: map[string][]nvml.Process{}, fail: map[string]bool{}}}
	for i := 0; i < cards; i++ {
		n.cards = append(n.cards, nvml.Card{Index: i, UUID: fmt.Sprintf("GPU-%d", i), MemoryMiB: 80 * 1024})
	}
	return n
}

// uid makes a pod UID in the API server's form from a small number.
func uid(i int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)) }

// cid makes a 64-hex-digit container ID.
func cid(i int) string { return fmt.Sprintf("%064x", i) }

// pod adds a running pod ns/name whose containers have the given names;
// container i has ID cid(podIndex*100+i).
func (n *node) pod(name string, containers ...string) *corev1.Pod {
	n.nextID++
	b := podtest.Make("ns", name).UID(string(uid(n.nextID))).Phase(corev1.PodRunning)
	for i, c := range containers {
		b.Container(c).ContainerStatus(c, "containerd://"+cid(n.nextID*100+i))
	}
	p := b.Obj()
	n.pods = append(n.pods, p)
	return p
}

// grant records that the kubelet gave container of pod units on card.
func (n *node) grant(p *corev1.Pod, container string, card int, units int64) {
	h := podresources.Holding{Namespace: p.Namespace, Pod: p.Name, Container: container}
	for u := int64(0); u < units; u++ {
		h.IDs = append(h.IDs, api.UnitID(n.cards[card].UUID, u))
	}
	n.holds = append(n.holds, h)
}

// run starts a process pid of container (index into the pod's containers)
// using bytes on card, with a systemd-driver cgroup v2 path.
func (n *node) run(pid uint32, p *corev1.Pod, container, card int, bytes int64) {
	path := "/"
	if p != nil {
		id := p.Status.ContainerStatuses[container].ContainerID[len("containerd://"):]
		path = fmt.Sprintf("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope",
			underscores(string(p.UID)), id)
	}
	n.write(pid, "0::"+path+"\n")
	n.nvmlOnly(pid, card, bytes)
}

// nvmlOnly makes NVML report pid on card without a /proc entry (an exited
// process).
func (n *node) nvmlOnly(pid uint32, card int, bytes int64) {
	u := n.cards[card].UUID
	n.nv.procs[u] = append(n.nv.procs[u], nvml.Process{PID: pid, UsedBytes: uint64(bytes), UsedKnown: true})
}

func (n *node) write(pid uint32, cgroup string) {
	dir := filepath.Join(n.proc, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func underscores(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func (n *node) sampler() *Sampler {
	return &Sampler{
		NVML:         n.nv,
		Cards:        func() []nvml.Card { return n.cards },
		Unit:         api.UnitGiB,
		Proc:         n.proc,
		Pods:         func() ([]*corev1.Pod, error) { return n.pods, nil },
		PodResources: n.holds,
		Clock:        func() time.Time { return t0 },
	}
}

func (n *node) sweep() Sample {
	s := n.sampler()
	s.PodResources = n.holds
	out, err := s.Sweep(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

func ref(p *corev1.Pod, container string) Ref {
	return Ref{Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Container: container}
}
