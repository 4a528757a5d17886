package inspect

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
)

func ptr(v int64) *int64 { return &v }

// TestJSONParsesBackToTheView: -o json is the View, field for field, and -o
// yaml says the same thing.
func TestJSONParsesBackToTheView(t *testing.T) {
	objs := []runtime.Object{
		makeNode(t, "gpu-2", "10.0.0.2").cordoned().inventory(api.UnitGiB,
			gpu("gpu-2", 0, a100, 40), withState(gpu("gpu-2", 1, a100, 40), api.CardUnhealthy, "XID 79")).obj(),
		makeNode(t, "gpu-1", "10.0.0.1").capacity(16, 16).obj(),
		runningPod("ml", "b").GPU("c", 5).AssignOn("gpu-2", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
		runningPod("ml", "a").GPU("c", 3).AssignOn("gpu-2", api.PhaseAllocated, 0).Obj(),
		runningPod("ml", "x").GPU("c", 1).Node("gpu-2").Annotation(api.DefaultNames().AnnotationAssignment(), "[]").Obj(),
	}
	out, _, err := runCmd(t, objs, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got View
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	malformed := "pod ml/x: invalid GPU assignment: json: cannot unmarshal array into Go value of type api.Assignment; not counted"
	noInventory := "node gpu-1: example.com/gpu-mem capacity is 16 but the node has no gpushare.example.com/inventory annotation (is the gpushare device plugin running on it?); its cards and unit are unknown and it is left out of the totals"
	want := View{
		Version: ViewVersion,
		Source:  SourceAPIServer,
		Nodes: []Node{
			{
				Name: "gpu-1", Address: "10.0.0.1", Capacity: ptr(16), Allocatable: ptr(16),
				InventoryError: "node gpu-1: node has no " + api.DefaultNames().AnnotationInventory() + " annotation (is the gpushare device plugin running on it?)",
				Cards:          []Card{}, Uncounted: []Uncounted{},
			},
			{
				Name: "gpu-2", Address: "10.0.0.2", Cordoned: true, Unit: api.UnitGiB,
				Allocated: 8, Total: 80, InServiceAllocated: 8, InService: 40, Capacity: ptr(80), Allocatable: ptr(40),
				Cards: []Card{
					{Index: 0, UUID: "GPU-gpu-2-0", Model: a100, State: api.CardHealthy, Allocated: 8, Total: 40, Pods: []Pod{
						{Namespace: "ml", Name: "a", Container: "c", Units: 3, Phase: api.PhaseAllocated},
						{Namespace: "ml", Name: "b", Container: "c", Units: 5, Phase: api.PhaseAssigned, Pending: true},
					}},
					{Index: 1, UUID: "GPU-gpu-2-1", Model: a100, State: api.CardUnhealthy, Reason: "XID 79", Total: 40, Pods: []Pod{}},
				},
				Uncounted: []Uncounted{{Namespace: "ml", Name: "x", Code: WarnMalformedAssignment, Message: malformed}},
			},
		},
		// gpu-2 is cordoned: its free memory is no one's.
		Totals: []Total{{Unit: api.UnitGiB, Allocated: 8, Total: 80, Percent: 10, InServiceAllocated: 8, InService: 40, InServicePercent: 20}},
		Models: []ModelSummary{{Model: a100, Unit: api.UnitGiB, Nodes: 1, Cards: 2, InServiceCards: 1, InServiceAllocated: 8, InService: 40}},
		Warnings: []Warning{
			{Node: "gpu-1", Code: WarnNoInventory, Message: noInventory},
			{Node: "gpu-2", Pod: "ml/x", Code: WarnMalformedAssignment, Message: malformed},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-o json (-want +got):\n%s", diff)
	}

	out, _, err = runCmd(t, objs, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML View
	if err := yaml.Unmarshal([]byte(out), &fromYAML); err != nil {
		t.Fatalf("-o yaml does not parse: %v\n%s", err, out)
	}
	if diff := cmp.Diff(got, fromYAML); diff != "" {
		t.Errorf("-o yaml differs from -o json (-json +yaml):\n%s", diff)
	}
}

func TestPercentRoundsHalfUp(t *testing.T) {
	cases := []struct {
		allocated, total, want int64
	}{
		{1, 8, 13},   // 12.5 rounds up; truncation would say 12
		{25, 30, 83}, // 83.3
		{2, 3, 67},   // 66.7
		{1, 200, 1},  // 0.5
		{1, 201, 0},  // 0.497
		{0, 80, 0},
		{80, 80, 100},
		{20, 15, 133}, // overcommitted
		{5, 0, 0},     // no capacity
		{api.MaxUnits * 1000, api.MaxUnits * 3000, 33},
	}
	for _, c := range cases {
		if got := Percent(c.allocated, c.total); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.allocated, c.total, got, c.want)
		}
	}
}

func TestBadInputExits(t *testing.T) {
	objs := scenarios["mixed-sizes"](t)
	cases := []struct {
		name     string
		args     []string
		wantIs   error
		wantCode int
		wantMsg  string
	}{
		{"unknown node", []string{"gpu-zz"}, ErrNodeNotFound, ExitError, `node "gpu-zz": node not found`},
		{"node without GPUs", []string{"cpu-1"}, ErrNotGPUNode, ExitError, `node "cpu-1": not a GPU node`},
		{"two nodes", []string{"gpu-a", "gpu-b"}, ErrUsage, ExitUsage, "at most one NODE argument"},
		{"unknown output", []string{"-o", "wide"}, ErrUsage, ExitUsage, `unknown output format "wide"`},
		{"details with json", []string{"-d", "-o", "json"}, ErrUsage, ExitUsage, "-d/--details is a table view"},
		{"unknown flag", []string{"--color"}, ErrUsage, ExitUsage, "unknown flag: --color"},
		{"pending with details", []string{"pending", "-d"}, ErrUsage, ExitUsage, "unknown shorthand flag"},
		{"pending with a node", []string{"pending", "gpu-a"}, ErrUsage, ExitUsage, "pending takes no NODE argument"},
		{"bad selector", []string{"-l", "a=(b"}, ErrUsage, ExitUsage, `-l "a=(b"`},
		{"selector on the extender", []string{"-l", "a=b", "--from-extender", "http://x"}, ErrUsage, ExitUsage, "leave out --from-extender"},
		{"model without letters", []string{"--model", "--"}, ErrUsage, ExitUsage, "--model"},
		{"zero interval", []string{"-w", "--interval", "0s"}, ErrUsage, ExitUsage, "--interval 0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runCmd(t, objs, c.args...)
			if !errors.Is(err, c.wantIs) {
				t.Fatalf("error = %v, want one matching %v", err, c.wantIs)
			}
			if got := ExitCode(err); got != c.wantCode {
				t.Errorf("ExitCode = %d, want %d", got, c.wantCode)
			}
			if !strings.Contains(err.Error(), c.wantMsg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line containing %q", err, c.wantMsg)
			}
			if out != "" {
				t.Errorf("printed %q before failing, want nothing", out)
			}
		})
	}
	if got := ExitCode(nil); got != ExitOK {
		t.Errorf("ExitCode(nil) = %d, want %d", got, ExitOK)
	}
}

// fakeAPIServer serves the node and pod lists of objs the way a
// kube-apiserver does, so that the command runs through its real
// flags → kubeconfig → clientset path.
func fakeAPIServer(t *testing.T, objs []runtime.Object) *httptest.Server {
	t.Helper()
	nodes := &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
	pods := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			nodes.Items = append(nodes.Items, *o)
		case *corev1.Pod:
			pods.Items = append(pods.Items, *o)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body any
		switch r.URL.Path {
		case "/api/v1/nodes":
			body = nodes
		case "/api/v1/pods":
			body = pods
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runReal runs the command without an injected client: it builds one from
// its kubectl flags.
func runReal(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut strings.Builder
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd := NewCmd(o)
	cmd.SetArgs(append([]string{}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestRealClientAgainstAPIServer(t *testing.T) {
	objs := scenarios["mixed-sizes"](t)
	srv := fakeAPIServer(t, objs)
	got, err := runReal(t, "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := runCmd(t, objs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("over HTTP (-fake clientset +real client):\n%s", diff)
	}

	// The same through a kubeconfig file and --context.
	kubeconfig := filepath.Join(t.TempDir(), "config")
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + srv.URL +
		"\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: gpus\n  context: {cluster: c, user: u}\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = runReal(t, "--kubeconfig", kubeconfig, "--context", "gpus")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("via kubeconfig (-fake clientset +real client):\n%s", diff)
	}
}

func TestUnreachableClusterIsOneLine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = runReal(t, "--server", "http://"+addr)
	if err == nil {
		t.Fatal("no error from an unreachable API server")
	}
	if ExitCode(err) != ExitError {
		t.Errorf("ExitCode = %d, want %d", ExitCode(err), ExitError)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "cannot reach the Kubernetes API server at http://"+addr) || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line starting with the server address", msg)
	}
}

func TestNoKubeconfigIsOneLine(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", empty)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := runReal(t)
	if !errors.Is(err, errNoConfig) {
		t.Fatalf("error = %v, want %v", err, errNoConfig)
	}
	if ExitCode(err) != ExitError {
		t.Errorf("ExitCode = %d, want %d", ExitCode(err), ExitError)
	}

	_, err = runReal(t, "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.HasPrefix(err.Error(), "cannot load the Kubernetes configuration:") {
		t.Errorf("missing --kubeconfig file: error = %v", err)
	}
}

// The device plugin leaves the record of a pod whose cards are right
// Assigned: once the kubelet has started the pod it holds its card, and is
// shown Allocated, not pending; a pod not started yet is pending.
func TestARunningPodWithAnAssignedRecordHoldsItsCard(t *testing.T) {
	objs := []runtime.Object{
		makeNode(t, "gpu-2", "10.0.0.2").inventory(api.UnitGiB, gpu("gpu-2", 0, a100, 40)).obj(),
		runningPod("ml", "running").GPU("c", 5).AssignOn("gpu-2", api.PhaseAssigned, 0).Obj(),
		runningPod("ml", "starting").GPU("c", 3).AssignOn("gpu-2", api.PhaseAssigned, 0).Phase(corev1.PodPending).Obj(),
	}
	nodes, pods := split(objs)
	v := Build(api.DefaultNames(), Cluster{Nodes: nodes, Pods: pods})
	got := map[string]Pod{}
	for _, p := range v.Nodes[0].Cards[0].Pods {
		got[p.Name] = p
	}
	if p := got["running"]; p.Phase != api.PhaseAllocated || p.Pending {
		t.Errorf("running pod with an Assigned record: phase %s, pending %v; want Allocated, not pending", p.Phase, p.Pending)
	}
	if p := got["starting"]; p.Phase != api.PhaseAssigned || !p.Pending {
		t.Errorf("pod not started yet: phase %s, pending %v; want Assigned, pending", p.Phase, p.Pending)
	}
}
