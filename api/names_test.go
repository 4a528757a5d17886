package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNewNamesRefusesWhatKubernetesWould(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 62) + ".io" // 254
	for _, tc := range []struct {
		name          string
		domain        string
		memory, whole corev1.ResourceName
		// wantIn are substrings of the error; none: valid.
		wantIn []string
	}{
		{name: "the defaults are valid", domain: DefaultDomain, memory: DefaultResourceName, whole: DefaultWholeResourceName},
		{name: "Alibaba's resource name is valid", domain: "gpushare.acme.io", memory: AlibabaResourceName, whole: "acme.io/gpu"},
		{name: "a domain with an upper-case letter is refused", domain: "GPUshare.example.com", memory: DefaultResourceName, whole: DefaultWholeResourceName,
			wantIn: []string{`domain "GPUshare.example.com"`, "e.g. \"gpushare.example.com\""}},
		{name: "an empty domain is refused", domain: "", memory: DefaultResourceName, whole: DefaultWholeResourceName, wantIn: []string{`domain ""`}},
		{name: "a domain too long for a key is refused", domain: long, memory: DefaultResourceName, whole: DefaultWholeResourceName, wantIn: []string{"domain", "253"}},
		{name: "a resource name without a domain is refused", domain: DefaultDomain, memory: "gpu-mem", whole: DefaultWholeResourceName,
			wantIn: []string{`resource name "gpu-mem": it has no domain prefix`, `e.g. "example.com/gpu-mem"`}},
		{name: "a kubernetes.io resource name is refused", domain: DefaultDomain, memory: "kubernetes.io/gpu-mem", whole: DefaultWholeResourceName, wantIn: []string{"reserved"}},
		{name: "a resource name with a space is refused", domain: DefaultDomain, memory: DefaultResourceName, whole: "example.com/gpu card",
			wantIn: []string{`whole-card resource name "example.com/gpu card"`, `e.g. "example.com/gpu"`}},
		{name: "the same name for both resources is refused", domain: DefaultDomain, memory: DefaultResourceName, whole: DefaultResourceName, wantIn: []string{"both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNames(tc.domain, tc.memory, tc.whole)
			if len(tc.wantIn) == 0 {
				if err != nil {
					t.Fatalf("NewNames: %v", err)
				}
				if n.Domain() != tc.domain || n.ResourceName() != tc.memory || n.WholeResourceName() != tc.whole {
					t.Fatalf("NewNames gave %v", n)
				}
				return
			}
			if !errors.Is(err, ErrInvalidNames) {
				t.Fatalf("err = %v, want ErrInvalidNames", err)
			}
			for _, want := range tc.wantIn {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestNamesDeriveEveryKeyFromTheDomain(t *testing.T) {
	n, err := NewNames("gpu.acme.io", AlibabaResourceName, "acme.io/gpu")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{n.AnnotationInventory(), n.AnnotationAssignment(), n.AnnotationIsolation(), n.LabelGPUCount(), n.LabelGPUModel(), n.LabelGPUMemory(),
		n.AnnotationCardModels(), n.AnnotationExcludeCardModels(), n.AnnotationCardUUIDs(), n.AnnotationPolicy(), n.AnnotationSimulatedContainers(), n.AnnotationSimulatedGPUUse(), n.LabelDevicePlugin()}
	want := []string{"gpu.acme.io/inventory", "gpu.acme.io/assignment", "gpu.acme.io/isolate", "gpu.acme.io/gpu-count", "gpu.acme.io/gpu-model", "gpu.acme.io/gpu-memory",
		"gpu.acme.io/card-models", "gpu.acme.io/exclude-card-models", "gpu.acme.io/card-uuids", "gpu.acme.io/policy", "gpu.acme.io/e2e-containers", "gpu.acme.io/e2e-gpu-use", "gpu.acme.io/device-plugin"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("keys (-want +got):\n%s", diff)
	}
	if d := DefaultNames(); d.AnnotationAssignment() != "gpushare.example.com/assignment" || d.ResourceName() != "example.com/gpu-mem" || d.WholeResourceName() != "example.com/gpu" {
		t.Fatalf("DefaultNames = %v", d)
	}
	if (Names{}).OrDefault() != DefaultNames() || n.OrDefault() != n {
		t.Fatal("OrDefault: the zero value must become the defaults, a configured value stay")
	}
}

// A pod and its record written under one installation's names mean nothing
// under another's: its demand is read from the configured resource names
// only, its record from the configured domain only.
func TestRequestAndRecordAreReadUnderTheConfiguredNames(t *testing.T) {
	alibaba, err := NewNames("gpushare.acme.io", AlibabaResourceName, "acme.io/gpu")
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{
		{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{AlibabaResourceName: resource.MustParse("8")}}},
	}}}
	req, err := alibaba.RequestFromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ContainerRequest{{Name: "c", Units: 8}}, req.Containers); diff != "" {
		t.Errorf("request under the Alibaba names (-want +got):\n%s", diff)
	}
	if req, err := DefaultNames().RequestFromPod(pod); err != nil || !req.Empty() {
		t.Errorf("under the default names the pod must ask for nothing; got %+v, %v", req, err)
	}

	a := Assignment{Version: AssignmentVersion, PodUID: "u1", Node: "n1", Unit: UnitGiB, Phase: PhaseAssigned, Containers: []ContainerAssignment{{Name: "c", Units: 8, CardUUID: "GPU-1", CardIndex: 0}}}
	s, err := EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{alibaba.AnnotationAssignment(): s}
	if _, err := alibaba.AssignmentFromPod(pod); err != nil {
		t.Fatalf("record under the configured domain: %v", err)
	}
	_, err = DefaultNames().AssignmentFromPod(pod)
	if !errors.Is(err, ErrNoAssignment) || !strings.Contains(err.Error(), "gpushare.example.com/assignment") {
		t.Fatalf("under another domain: err = %v, want ErrNoAssignment naming that domain's key", err)
	}
}

func TestMismatchesNameTheObjectsAndTheFlagToChange(t *testing.T) {
	n := DefaultNames()
	rec := `{"version":1,"unit":"GiB","cards":[]}`
	node := func(name string, ann map[string]string, capacity ...corev1.ResourceName) *corev1.Node {
		nd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}, Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}
		for _, c := range capacity {
			nd.Status.Capacity[c] = resource.MustParse("80")
		}
		return nd
	}
	nodes := []*corev1.Node{
		node("ours", map[string]string{n.AnnotationInventory(): rec}, n.ResourceName()),
		node("theirs-1", map[string]string{"gpushare.acme.io/inventory": rec}, AlibabaResourceName),
		node("theirs-2", map[string]string{"gpushare.acme.io/inventory": rec}),
		node("plain", map[string]string{"other.io/inventory": "not a record"}),
		node("renamed", map[string]string{n.AnnotationInventory(): rec}, AlibabaResourceName),
	}
	got := n.NodeMismatches(nodes)
	if len(got) != 2 || !strings.Contains(got[0], `a gpushare inventory under the domain "gpushare.acme.io" (gpushare.acme.io/inventory), not under this program's "gpushare.example.com", is on nodes theirs-1, theirs-2`) || !strings.Contains(got[0], "--domain") ||
		!strings.Contains(got[1], "this program's inventory (gpushare.example.com/inventory) is on node renamed") || !strings.Contains(got[1], "--resource-name") {
		t.Fatalf("NodeMismatches = %q", got)
	}
	if got := n.NodeMismatches(nodes[:1]); len(got) != 0 {
		t.Fatalf("a node that agrees: NodeMismatches = %q, want none", got)
	}

	pod := func(name string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann}}
	}
	pods := []*corev1.Pod{pod("ours", map[string]string{n.AnnotationAssignment(): `{"version":1}`}), pod("theirs", map[string]string{"gpushare.acme.io/assignment": `{"version":1}`}), pod("none", nil)}
	if got := n.PodMismatches(pods); len(got) != 1 || !strings.Contains(got[0], `a gpushare assignment under the domain "gpushare.acme.io" (gpushare.acme.io/assignment), not under this program's "gpushare.example.com", is on pod ns/theirs`) {
		t.Fatalf("PodMismatches = %q", got)
	}
}

func TestCompatEnvOnlyUnderAlibabasResourceName(t *testing.T) {
	alibaba, err := NewNames(DefaultDomain, AlibabaResourceName, DefaultWholeResourceName)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_CONTAINER": "8", "ALIYUN_COM_GPU_MEM_DEV": "79"}
	if diff := cmp.Diff(want, alibaba.CompatEnv(1, 8, 79)); diff != "" {
		t.Errorf("Alibaba names (-want +got):\n%s", diff)
	}
	if got := DefaultNames().CompatEnv(1, 8, 79); got != nil {
		t.Errorf("default names: %v, want none", got)
	}
}
