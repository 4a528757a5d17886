package inspect

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

const (
	a100 = "NVIDIA A100-SXM4-40GB"
	h100 = "NVIDIA H100 80GB HBM3"
	t4   = "Tesla T4"
)

// scenarios are the clusters the golden tests show; each returns the objects
// a fake API server holds.
var scenarios = map[string]func(t *testing.T) []runtime.Object{
	"empty": func(t *testing.T) []runtime.Object {
		// A cluster with only a CPU node and a CPU pod.
		return []runtime.Object{
			makeNode(t, "cpu-1", "10.0.0.9").obj(),
			runningPod("default", "web").Container("nginx").Node("cpu-1").Obj(),
		}
	},
	"mixed-sizes": func(t *testing.T) []runtime.Object {
		// Nodes of 1, 2 and 4 cards of three sizes; a node with fewer cards
		// leaves the extra columns blank. gpu-c is cordoned.
		return []runtime.Object{
			makeNode(t, "gpu-b", "10.0.0.2").inventory(api.UnitGiB, gpu("gpu-b", 0, a100, 40), gpu("gpu-b", 1, a100, 40)).obj(),
			makeNode(t, "gpu-a", "10.0.0.1").inventory(api.UnitGiB, gpu("gpu-a", 0, t4, 15)).obj(),
			makeNode(t, "gpu-c", "10.0.0.3").cordoned().inventory(api.UnitGiB,
				gpu("gpu-c", 0, h100, 79), gpu("gpu-c", 1, h100, 79), gpu("gpu-c", 2, h100, 79), gpu("gpu-c", 3, h100, 79)).obj(),
			makeNode(t, "cpu-1", "10.0.0.9").obj(),
			runningPod("ml", "train-0").GPU("trainer", 30).AssignOn("gpu-b", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "train-1").GPU("trainer", 8).AssignOn("gpu-b", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "serve").GPU("model", 20).Container("sidecar").GPU("tokenizer", 4).AssignOn("gpu-b", api.PhaseAllocated, 1, 1).Obj(),
			runningPod("default", "notebook").GPU("jupyter", 7).AssignOn("gpu-a", api.PhaseAllocated, 0).Obj(),
			runningPod("research", "llm").GPU("a", 60).GPU("b", 70).AssignOn("gpu-c", api.PhaseAllocated, 0, 3).Obj(),
			// Finished pods and a pod not yet bound hold nothing.
			runningPod("ml", "done").GPU("trainer", 40).AssignOn("gpu-b", api.PhaseAllocated, 1).Phase(corev1.PodSucceeded).Obj(),
			runningPod("ml", "crashed").GPU("trainer", 40).AssignOn("gpu-b", api.PhaseAllocated, 1).Phase(corev1.PodFailed).Obj(),
			runningPod("ml", "waiting").GPU("trainer", 10).Phase(corev1.PodPending).Obj(),
		}
	},
	"unhealthy-isolated": func(t *testing.T) []runtime.Object {
		// Unhealthy and isolated cards still count their pods; the kubelet
		// reports only the healthy card as allocatable.
		return []runtime.Object{
			makeNode(t, "gpu-x", "10.0.1.1").inventory(api.UnitGiB,
				gpu("gpu-x", 0, a100, 40),
				withState(gpu("gpu-x", 1, a100, 40), api.CardUnhealthy, "XID 79"),
				withState(gpu("gpu-x", 2, a100, 40), api.CardIsolated, "isolated by operator")).obj(),
			runningPod("ml", "on-healthy").GPU("c", 10).AssignOn("gpu-x", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "on-unhealthy").GPU("c", 25).AssignOn("gpu-x", api.PhaseAllocated, 1).Obj(),
			runningPod("ml", "on-isolated").GPU("c", 5).AssignOn("gpu-x", api.PhaseAllocated, 2).Obj(),
			// An operator isolated card 1 of gpu-y by annotation; the device
			// plugin has not reported it yet, the extender already honours it.
			makeNode(t, "gpu-y", "10.0.1.2").annotate(api.DefaultNames().AnnotationIsolation(), "1").inventory(api.UnitGiB,
				gpu("gpu-y", 0, t4, 15), gpu("gpu-y", 1, t4, 15)).obj(),
			// A typo in the annotation: the extender refuses the node.
			makeNode(t, "gpu-z", "10.0.1.3").annotate(api.DefaultNames().AnnotationIsolation(), "card-1").inventory(api.UnitGiB,
				gpu("gpu-z", 0, t4, 15)).obj(),
		}
	},
	"pending": func(t *testing.T) []runtime.Object {
		// Two pods the extender placed that the device plugin has not yet
		// allocated, beside an allocated one.
		return []runtime.Object{
			makeNode(t, "gpu-p", "10.0.2.1").inventory(api.UnitGiB, gpu("gpu-p", 0, a100, 40), gpu("gpu-p", 1, a100, 40)).obj(),
			runningPod("ml", "running").GPU("c", 16).AssignOn("gpu-p", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "starting").GPU("c", 16).AssignOn("gpu-p", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
			runningPod("ml", "starting-2").GPU("c", 3).AssignOn("gpu-p", api.PhaseAssigned, 1).Phase(corev1.PodPending).Obj(),
		}
	},
	"no-inventory": func(t *testing.T) []runtime.Object {
		// gpu-n reports capacity but its device plugin published no inventory.
		return []runtime.Object{
			makeNode(t, "gpu-n", "10.0.3.1").capacity(80, 80).obj(),
			makeNode(t, "gpu-ok", "10.0.3.2").inventory(api.UnitGiB, gpu("gpu-ok", 0, a100, 40)).obj(),
			runningPod("ml", "old").GPU("c", 10).AssignOn("gpu-n", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "fine").GPU("c", 10).AssignOn("gpu-ok", api.PhaseAllocated, 0).Obj(),
		}
	},
	"malformed": func(t *testing.T) []runtime.Object {
		// One good pod; the others carry assignments the inspector must not
		// believe, or none at all. The rest of the view still prints.
		good := runningPod("ml", "good").GPU("c", 10).AssignOn("gpu-m", api.PhaseAllocated, 0).Obj()
		return []runtime.Object{
			makeNode(t, "gpu-m", "10.0.4.1").inventory(api.UnitGiB, gpu("gpu-m", 0, a100, 40), gpu("gpu-m", 1, a100, 40)).obj(),
			good,
			runningPod("ml", "garbage").GPU("c", 10).Node("gpu-m").Annotation(api.DefaultNames().AnnotationAssignment(), "{not json").Obj(),
			// A manifest that copied another pod's record: the UID cannot match.
			runningPod("ml", "copied").GPU("c", 10).Node("gpu-m").Annotation(api.DefaultNames().AnnotationAssignment(), good.Annotations[api.DefaultNames().AnnotationAssignment()]).Obj(),
			runningPod("ml", "wrong-units").GPU("c", 12).AssignOn("gpu-m", api.PhaseAllocated, 1).EditAssignment(func(a *api.Assignment) { a.Containers[0].Units = 20 }).Obj(),
			runningPod("ml", "no-record").GPU("c", 6).Node("gpu-m").Obj(),
			runningPod("ml", "ghost-card").GPU("c", 4).AssignOn("gpu-m", api.PhaseAllocated, 7).Obj(),
		}
	},
	"memory-in-use": func(t *testing.T) []runtime.Object {
		// The device plugin samples memory in use: card 0 holds a pod using
		// more than its 10 GiB, card 1 has no figure (NVML could not list it).
		used := int64(12800)
		c0 := gpu("gpu-u", 0, a100, 40)
		c0.UsedMiB = &used
		return []runtime.Object{
			makeNode(t, "gpu-u", "10.0.6.1").inventory(api.UnitGiB, c0, gpu("gpu-u", 1, a100, 40)).obj(),
			runningPod("ml", "greedy").GPU("c", 10).AssignOn("gpu-u", api.PhaseAllocated, 0).Obj(),
		}
	},
	"whole-cards": wholeCardsScenario,
	"dra":         draScenario,
	"eight-cards": eightCardsScenario,
	"waiting":     waitingScenario,
	"reporting-health": func(t *testing.T) []runtime.Object {
		// Every way a node's GPU reporting can be off.
		return []runtime.Object{
			makeNode(t, "gpu-1-zero-capacity", "10.0.5.1").rawInventory(api.UnitGiB, gpu("gpu-1-zero-capacity", 0, t4, 15)).capacity(0, 0).obj(),
			makeNode(t, "gpu-2-mismatch", "10.0.5.2").rawInventory(api.UnitGiB, gpu("gpu-2-mismatch", 0, a100, 40), gpu("gpu-2-mismatch", 1, a100, 40)).capacity(40, 40).obj(),
			makeNode(t, "gpu-3-bad-inventory", "10.0.5.3").capacity(40, 40).annotate(api.DefaultNames().AnnotationInventory(), `{"version":7}`).obj(),
			makeNode(t, "gpu-4-labelled-only", "10.0.5.4").label(api.LabelEnabled, "true").obj(),
			makeNode(t, "gpu-5-no-cards", "10.0.5.5").rawInventory(api.UnitGiB).obj(),
			makeNode(t, "gpu-6-mib", "10.0.5.6").inventory(api.UnitMiB, gpu("gpu-6-mib", 0, t4, 15360)).obj(),
			makeNode(t, "gpu-7-full", "10.0.5.7").inventory(api.UnitGiB, gpu("gpu-7-full", 0, t4, 15)).obj(),
			runningPod("ml", "mib").GPU("c", 4096).AssignOn("gpu-6-mib", api.PhaseAllocated, 0).EditAssignment(func(a *api.Assignment) { a.Unit = api.UnitMiB }).Obj(),
			runningPod("ml", "big-1").GPU("c", 10).AssignOn("gpu-7-full", api.PhaseAllocated, 0).Obj(),
			runningPod("ml", "big-2").GPU("c", 10).AssignOn("gpu-7-full", api.PhaseAllocated, 0).Obj(),
		}
	},
}

// runCmd runs the command as `kubectl inspect gpushare args...` against a
// fake clientset holding objs, and returns stdout, stderr and Run's error.
func runCmd(t *testing.T, objs []runtime.Object, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	o.Client = fake.NewClientset(objs...)
	cmd := NewCmd(o)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// goldenCases are the command lines whose output is kept in testdata/.
var goldenCases = []struct {
	golden   string
	scenario string
	args     []string
}{
	{"empty.txt", "empty", nil},
	{"empty.json", "empty", []string{"-o", "json"}},
	{"mixed-sizes.txt", "mixed-sizes", nil},
	{"mixed-sizes-details.txt", "mixed-sizes", []string{"-d"}},
	{"mixed-sizes.json", "mixed-sizes", []string{"-o", "json"}},
	{"mixed-sizes.yaml", "mixed-sizes", []string{"-o", "yaml"}},
	{"mixed-sizes-one-node.txt", "mixed-sizes", []string{"gpu-b"}},
	{"mixed-sizes-one-node-details.txt", "mixed-sizes", []string{"gpu-c", "--details"}},
	{"unhealthy-isolated.txt", "unhealthy-isolated", nil},
	{"unhealthy-isolated-details.txt", "unhealthy-isolated", []string{"-d"}},
	{"pending-details.txt", "pending", []string{"-d"}},
	{"pending.json", "pending", []string{"-o", "json"}},
	{"no-inventory.txt", "no-inventory", nil},
	{"no-inventory-details.txt", "no-inventory", []string{"-d"}},
	{"malformed.txt", "malformed", nil},
	{"malformed-details.txt", "malformed", []string{"-d"}},
	{"memory-in-use-details.txt", "memory-in-use", []string{"-d"}},
	{"memory-in-use.json", "memory-in-use", []string{"-o", "json"}},
	{"reporting-health.txt", "reporting-health", nil},
	{"reporting-health-details.txt", "reporting-health", []string{"-d"}},
	{"whole-cards-details.txt", "whole-cards", []string{"-d"}},
	{"whole-cards.json", "whole-cards", []string{"-o", "json"}},
	{"eight-cards.txt", "eight-cards", nil},
	{"waiting-pending.txt", "waiting", []string{"pending"}},
	{"waiting-pending.json", "waiting", []string{"pending", "-o", "json"}},
	{"waiting-pending-selector.txt", "waiting", []string{"pending", "-n", "ml", "-l", "team=a"}},
	{"waiting-pool.txt", "waiting", []string{"-l", "pool=train"}},
	{"mixed-sizes-model.txt", "mixed-sizes", []string{"--model", "A100"}},
	{"mixed-sizes-namespace-details.txt", "mixed-sizes", []string{"-d", "-n", "research"}},
	{"dra.txt", "dra", nil},
	{"dra-details.txt", "dra", []string{"-d"}},
	{"dra.json", "dra", []string{"-o", "json"}},
	{"dra-one-node-details.txt", "dra", []string{"dra-a", "-d"}},
	{"dra-namespace-details.txt", "dra", []string{"-d", "-n", "research"}},
}

func TestGolden(t *testing.T) {
	cases := goldenCases
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			out, errOut, err := runCmd(t, scenarios[tc.scenario](t), tc.args...)
			if err != nil {
				t.Fatalf("run %v: %v (stderr %q)", tc.args, err, errOut)
			}
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./inspector/... -update to create it)", err)
			}
			// Compared line by line, so that a diff reads like the output.
			if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(out, "\n")); diff != "" {
				t.Errorf("output differs from %s (-want +got; -update rewrites it):\n%s", path, diff)
			}
		})
	}
}

// TestOutputIsStable: the same cluster listed in another order prints the
// same bytes.
func TestOutputIsStable(t *testing.T) {
	objs := scenarios["mixed-sizes"](t)
	reversed := make([]runtime.Object, len(objs))
	for i, o := range objs {
		reversed[len(objs)-1-i] = o
	}
	for _, args := range [][]string{nil, {"-d"}, {"-o", "json"}} {
		first, _, err := runCmd(t, objs, args...)
		if err != nil {
			t.Fatal(err)
		}
		second, _, err := runCmd(t, reversed, args...)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, second); diff != "" {
			t.Errorf("args %v: output depends on list order (-first +reversed):\n%s", args, diff)
		}
	}
}
